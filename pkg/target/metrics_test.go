package target

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// gather collects c and returns its gauges by metric, then by target.
func gather(t *testing.T, c prometheus.Collector) map[string]map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "target" {
					continue
				}
				if out[f.GetName()] == nil {
					out[f.GetName()] = map[string]float64{}
				}
				out[f.GetName()][l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// gatherTarget collects c and returns the gauges of target name, by metric.
func gatherTarget(t *testing.T, c prometheus.Collector, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for metric, byTarget := range gather(t, c) {
		if v, ok := byTarget[name]; ok {
			out[metric] = v
		}
	}
	return out
}

func TestCollectorReachable(t *testing.T) {
	up, down, fresh := newTestTarget(t, "up"), newTestTarget(t, "down"), newTestTarget(t, "fresh")
	up.setHealth(classify(nil), time.Now())
	down.setHealth(Health{Reason: v1alpha1.ReasonUnreachable}, time.Now())
	got := gather(t, Collector{Set: NewSet(up, down, fresh)})["flotilla_target_reachable"]
	want := map[string]float64{"up": 1, "down": 0, "fresh": 0}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("flotilla_target_reachable{target=%q} = %v, want %v (all: %v)", name, got[name], v, got)
		}
	}
}

// The collector's flotilla_target_ready is the Ready condition that
// Health.apply writes for the same look.
func TestCollectorReadyIsTheReadyCondition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		health *Health
		synced bool
		want   float64
	}{
		{"connected and synced", &Health{Reachable: true, Authorized: true, Reason: v1alpha1.ReasonConnected}, true, 1},
		{"connected, cache not listed yet", &Health{Reachable: true, Authorized: true, Reason: v1alpha1.ReasonConnected}, false, 0},
		{"unreachable", &Health{Reason: v1alpha1.ReasonUnreachable}, true, 0},
		{"identity refused", &Health{Reachable: true, Reason: "Forbidden"}, true, 0},
		{"answers, but held back", &Health{Reachable: true, Authorized: true, Reason: v1alpha1.ReasonDelegatesLost}, true, 0},
		{"not looked at yet", nil, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTestTarget(t, "t")
			if tc.synced {
				// Started, with no namespace to list: synced.
				tg.informers.ctx = t.Context()
			}
			if tc.health != nil {
				tg.setHealth(*tc.health, time.Now())
				v := view{obj: &v1alpha1.ClusterTarget{}, status: &v1alpha1.TargetStatus{}}
				tc.health.apply(v, tc.synced)
				condition := 0.0
				if meta.IsStatusConditionTrue(v.status.Conditions, v1alpha1.TargetReady) {
					condition = 1
				}
				if condition != tc.want {
					t.Fatalf("the table is wrong: apply writes Ready %v, the case wants %v", condition, tc.want)
				}
			}
			got, ok := gatherTarget(t, Collector{Set: NewSet(tg)}, "t")["flotilla_target_ready"]
			if !ok || got != tc.want {
				t.Errorf("flotilla_target_ready = %v (present %t), want %v", got, ok, tc.want)
			}
		})
	}
}

// A ServiceAccount token the agent renews shows its iat and exp; a self
// target's (client-go renews it) and a token that is not a ServiceAccount's
// show none.
func TestCollectorTokenTimes(t *testing.T) {
	saToken := jwt(`{"sub":"system:serviceaccount:flotilla-system:flotilla-source-c1","iat":1000,"exp":1600}`)
	for _, tc := range []struct {
		name  string
		token string
		self  bool
		want  map[string]float64
	}{
		{"an invited ServiceAccount's", saToken, false, map[string]float64{
			"flotilla_target_token_issued_timestamp_seconds": 1000, "flotilla_target_token_expiry_timestamp_seconds": 1600}},
		{"a self target's", saToken, true, nil},
		{"a user's", jwt(`{"sub":"admin","iat":1000,"exp":1600}`), false, nil},
		{"not a JWT", "opaque", false, nil},
		{"none", "", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTestTarget(t, "t")
			tg.Self = tc.self
			if tc.token != "" {
				tg.SetToken(tc.token)
			}
			got := gatherTarget(t, Collector{Set: NewSet(tg)}, "t")
			for _, name := range []string{"flotilla_target_token_issued_timestamp_seconds", "flotilla_target_token_expiry_timestamp_seconds"} {
				v, ok := got[name]
				want, wantOK := tc.want[name]
				if ok != wantOK || v != want {
					t.Errorf("%s = %v (present %t), want %v (present %t)", name, v, ok, want, wantOK)
				}
			}
		})
	}
}
