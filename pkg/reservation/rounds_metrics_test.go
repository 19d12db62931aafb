package reservation_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// roundsByState reads flotilla_placement_rounds_total, by its pod label.
func roundsByState(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	rounds := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "flotilla_placement_rounds_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pod" {
					rounds[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return rounds
}

// TestRoundsAreCountedByThePodsState: flotilla_placement_rounds_total
// counts each round once, under the state of the source pod it found:
// waiting before an election, elected until bound, bound, then gone.
func TestRoundsAreCountedByThePodsState(t *testing.T) {
	h := newHarness(t, twoTargets())
	pod := h.newSourcePod("web-0")
	states := []string{"waiting", "elected", "bound", "deleting", "gone", "stale"}
	last := roundsByState(t)
	step := func(what, want string) {
		t.Helper()
		h.reconcile(pod)
		now := roundsByState(t)
		for _, state := range states {
			wantDelta := 0.0
			if state == want {
				wantDelta = 1
			}
			if now[state]-last[state] != wantDelta {
				t.Errorf("%s: %s rounds went up by %v, want %v", what, state, now[state]-last[state], wantDelta)
			}
		}
		last = now
	}
	step("the fan-out", "waiting")
	h.reserve(pod, "t1", onNode{name: "n1"})
	h.reserve(pod, "t2", onNode{name: "n2"})
	step("the round that elects", "waiting")
	step("a look while the elected candidate binds", "elected")
	h.bindCandidate(pod, h.election(pod).Target)
	step("the round that binds the pod", "elected")
	step("a look at the bound pod", "bound")
	if err := h.source.Tracker().Delete(podsResource, pod.Namespace, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	step("a look at the pod gone", "gone")
}
