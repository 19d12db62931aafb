package reservation_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TestSpreadCountsTheDomainsThePodMayUse: a self target whose zone a has
// on-demand nodes only and zones b and c spot nodes only; the Deployment's
// pods go to spot (a required node affinity, as the split sets it) under a
// zone spread (DoNotSchedule, maxSkew 1), with one sibling running in b
// and one in c. kube-scheduler counts only the zones of nodes the pod may
// use, b and c: a third pod may go to either. Counting zone a too (no pod
// can ever run there) would close b and c (2 against 0) and pin the
// candidate to zone a, where no node takes it.
func TestSpreadCountsTheDomainsThePodMayUse(t *testing.T) {
	h := newHarness(t, []target.Config{{Name: "home", Self: true}}, zoneSpread())
	h.c.SelfTopology = func([]string) (map[string][]string, []placement.Combination, bool) {
		comb := func(zone, capacity string) placement.Combination {
			return placement.Combination{Values: map[string]string{zoneKey: zone, protocol.DefaultCapacityNodeLabel: capacity}, Open: true}
		}
		return map[string][]string{zoneKey: {"a", "b", "c"}},
			[]placement.Combination{comb("a", protocol.CapacityOnDemand), comb("b", protocol.CapacitySpot), comb("c", protocol.CapacitySpot)}, true
	}
	h.placedSibling("web-b", "home", "b", true)
	h.placedSibling("web-c", "home", "c", true)
	toSpot := func(pod *corev1.Pod) {
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: protocol.DefaultCapacityNodeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{protocol.CapacitySpot}},
			}}},
		}}}
	}
	pod := h.newSourcePod("web-new", ofWorkload, toSpot)
	h.reconcile(pod)
	cand := h.candidate(pod, "home")
	if cand == nil {
		t.Fatal("no candidate in home: the spread closed every zone")
	}
	if got := candidate.PinnedDomain(cand); len(got) != 1 || (got[0] != "b" && got[0] != "c") {
		t.Fatalf("the candidate is pinned to %v, want zone b or c: zone a has no spot node", got)
	}
}
