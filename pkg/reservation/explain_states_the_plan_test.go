package reservation_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/cli"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TestExplainStatesWhatTheAgentDid feeds the same state to the agent's
// fan-out and to `kubectl flotilla explain`'s policy explanation: every
// target explain calls selected got a candidate of the pod, and every
// target it calls excluded got none, for the reason explain gives.
func TestExplainStatesWhatTheAgentDid(t *testing.T) {
	threeZones := func() []target.Config {
		return []target.Config{
			{Name: "ta", Labels: map[string]string{zoneKey: "a", "tier": "gold"}},
			{Name: "tb", Labels: map[string]string{zoneKey: "b", "tier": "gold"}},
			{Name: "tc", Labels: map[string]string{zoneKey: "c", "tier": "silver"}},
		}
	}
	goldOnly := zoneSpread()
	goldOnly.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	for _, tc := range []struct {
		name   string
		policy *v1alpha1.PlacementPolicy
		// siblings are placed siblings, by the target they run in.
		siblings []string
		// excluded are the targets the policy keeps the pod from, with
		// the beginning of the reason.
		excluded map[string]string
		// heldBack is a target the agent holds back (its delegates
		// vanished there): left out before the policy.
		heldBack string
	}{
		{name: "the spread keeps the pod out of a full zone", policy: zoneSpread(), siblings: []string{"ta"},
			excluded: map[string]string{"ta": "excluded: spread: "}},
		{name: "two zones ahead", policy: zoneSpread(), siblings: []string{"ta", "tb"},
			excluded: map[string]string{"ta": "excluded: spread: ", "tb": "excluded: spread: "}},
		{name: "the cluster selector, then the spread", policy: goldOnly, siblings: []string{"tb"},
			excluded: map[string]string{"tc": "excluded: does not match clusterSelector", "tb": "excluded: spread: "}},
		{name: "nothing placed yet", policy: zoneSpread()},
		{name: "a target held back, then the spread", policy: zoneSpread(), siblings: []string{"tb"}, heldBack: "tc",
			excluded: map[string]string{"tb": "excluded: spread: ", "tc": "excluded: 5 delegates"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, threeZones(), tc.policy)
			for i, in := range tc.siblings {
				h.placedSibling("web-placed-"+string(rune('a'+i)), in, strings.TrimPrefix(in, "t"), true)
			}
			if tc.heldBack != "" {
				for range target.LostThreshold {
					h.targets[tc.heldBack].LostDelegate(time.Now())
				}
			}
			pod := h.newSourcePod("web-new", ofWorkload)
			h.reconcile(pod)

			var targets []cli.PolicyTarget
			var answers []cli.Answer
			for _, cfg := range threeZones() {
				tg := h.targets[cfg.Name]
				targets = append(targets, cli.PolicyTarget{Name: tg.Name, VirtualNode: tg.NodeName, Labels: tg.Labels, Own: tg.Labels, HeldBack: tg.HeldBack(time.Now())})
				answers = append(answers, cli.Answer{Target: tg.Name})
			}
			pods, err := h.source.CoreV1().Pods(pod.Namespace).List(h.ctx, metav1.ListOptions{LabelSelector: labels.Everything().String()})
			if err != nil {
				t.Fatal(err)
			}
			pe := cli.ExplainPolicy(h.sourcePod(pod), []v1alpha1.PlacementPolicy{*tc.policy}, targets, pods.Items, answers)
			if pe == nil || pe.Problem != "" {
				t.Fatalf("explain: %+v, want the policy explained", pe)
			}
			for _, a := range answers {
				sent := h.candidate(pod, a.Target) != nil
				switch why, excluded := tc.excluded[a.Target]; {
				case excluded && !strings.HasPrefix(a.Policy, why):
					t.Errorf("explain says %s is %q, want %q...", a.Target, a.Policy, why)
				case !excluded && !strings.HasPrefix(a.Policy, "selected"):
					t.Errorf("explain says %s is %q, want selected", a.Target, a.Policy)
				}
				if selected := strings.HasPrefix(a.Policy, "selected"); selected != sent {
					t.Errorf("explain says %s is %q; the agent sent it a candidate: %v", a.Target, a.Policy, sent)
				}
			}
		})
	}
}
