package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placementpolicy"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestExplainCountsSiblingsAsTheAgentDoes: explain counts the workload's
// siblings by the agent's rules (placementpolicy.Counts, Tally), where its
// own count once differed: a source pod whose opt-in label was removed
// after admission counts, a pod of the source scheduler's name the
// webhook never admitted does not; a sibling in a target whose labels do
// not name the zone but whose summary lists one counts in that zone; and
// a sibling whose node its target reported counts in the reported zone,
// not in a zone its virtual node's labels (those common to its nodes)
// name.
func TestExplainCountsSiblingsAsTheAgentDoes(t *testing.T) {
	pol := v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: v1alpha1.PlacementPolicySpec{
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			SpreadConstraints: []v1alpha1.SpreadConstraint{{TopologyKey: testZone, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.DoNotSchedule}},
		},
	}
	zones := func(values ...string) *v1alpha1.ClusterSummaryStatus {
		ts := v1alpha1.TopologySummary{Key: testZone}
		for _, v := range values {
			ts.Values = append(ts.Values, v1alpha1.TopologyValue{Value: v, Nodes: 1})
		}
		return &v1alpha1.ClusterSummaryStatus{Topology: []v1alpha1.TopologySummary{ts}}
	}
	views := []policyView{
		// Its nodes are in zone a: its summary says so, no label does.
		{target: targetInfo{name: "summarized", virtualNode: "flotilla-summarized", summary: zones("a")}, labels: map[string]string{}},
		// Its virtual node says zone b, common to its nodes when its
		// summary was read; the node its target reported is in zone c.
		{target: targetInfo{name: "common", virtualNode: "flotilla-common", summary: zones("b", "c")}, labels: map[string]string{testZone: "b"}},
	}
	reportedIn := func(p corev1.Pod, zone string) corev1.Pod {
		p.Annotations[protocol.ElectedDomainAnnotation] = protocol.EncodeDomain(map[string]string{testZone: zone})
		return p
	}
	pod := replica("me", "", "")
	optedOut := replica("b", "flotilla-summarized", "")
	delete(optedOut.Labels, protocol.ElectLabel)
	notAdmitted := replica("c", "flotilla-summarized", "")
	delete(notAdmitted.Annotations, protocol.OriginalFieldsAnnotation)
	failed := replica("d", "flotilla-summarized", "")
	failed.Status.Phase = corev1.PodFailed
	siblings := []corev1.Pod{
		replica("a", "flotilla-summarized", ""),
		optedOut,
		notAdmitted,
		failed,
		reportedIn(replica("e", "flotilla-common", ""), "c"),
	}
	pe := explainPolicy(&pod, placementpolicy.Resolved{Policy: &pol}, views, nil, siblings, []Answer{{Target: "summarized"}, {Target: "common"}})
	if want := map[string]int{"a": 2, "c": 1}; !cmp.Equal(pe.Siblings, want) {
		t.Errorf("siblings %v, want %v", pe.Siblings, want)
	}
}
