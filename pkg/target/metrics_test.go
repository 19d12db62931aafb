package target

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// gatherReachable collects c and returns flotilla_target_reachable by target.
func gatherReachable(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "flotilla_target_reachable" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "target" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

func TestCollectorReachable(t *testing.T) {
	up, down, fresh := newTestTarget(t, "up"), newTestTarget(t, "down"), newTestTarget(t, "fresh")
	up.setHealth(classify(nil), time.Now())
	down.setHealth(Health{Reason: v1alpha1.ReasonUnreachable}, time.Now())
	got := gatherReachable(t, Collector{Set: NewSet(up, down, fresh)})
	want := map[string]float64{"up": 1, "down": 0, "fresh": 0}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("flotilla_target_reachable{target=%q} = %v, want %v (all: %v)", name, got[name], v, got)
		}
	}
}
