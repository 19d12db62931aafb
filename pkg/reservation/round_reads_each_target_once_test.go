package reservation_test

import (
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TestRoundReadsEachTargetOnce: a round weighs its targets several times
// (which invite the pod, what the policy selects, which get a candidate,
// with their prospects, and where its siblings count), but reads what each
// target's cache holds of the pod once, and each target's ClusterSummary
// at most once: every decision of the round judges one picture of a
// target.
func TestRoundReadsEachTargetOnce(t *testing.T) {
	targets := []target.Config{
		{Name: "ta", Labels: map[string]string{zoneKey: "a"}},
		{Name: "tb", Labels: map[string]string{zoneKey: "b"}},
		{Name: "tc", Labels: map[string]string{zoneKey: "c"}},
	}
	h := newHarness(t, targets, zoneSpread())
	// Fewer candidates than targets: the round weighs their prospects.
	h.c.MaxCandidates = 2
	h.placedSibling("web-placed", "ta", "a", true)
	pod := h.newSourcePod("web-new", ofWorkload)
	reads := reservation.CountTargetReads(t)

	check := func(round string) {
		t.Helper()
		views, summaries := reads.Take()
		for _, cfg := range targets {
			if n := views[cfg.Name]; n != 1 {
				t.Errorf("%s: what %s holds of the pod was read %d times, want once", round, cfg.Name, n)
			}
			if n := summaries[cfg.Name]; n > 1 {
				t.Errorf("%s: the summary of %s was read %d times, want once at most", round, cfg.Name, n)
			}
		}
	}
	h.reconcile(pod)
	check("fan-out")
	held := h.holding(pod)
	if len(held) == 0 {
		t.Fatal("the fan-out sent no candidate")
	}
	zones := map[string]string{}
	for _, cfg := range targets {
		zones[cfg.Name] = cfg.Labels[zoneKey]
	}
	for _, name := range held {
		h.reserve(pod, name, onNode{name: name + "-1", zone: zones[name], score: 10})
	}
	h.reconcile(pod)
	check("election")
}
