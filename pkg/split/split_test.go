package split

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestSplitOfFiveReplicas is the table: 5 pods created one after
// the other, each given its place knowing the places of those before.
func TestSplitOfFiveReplicas(t *testing.T) {
	for _, tc := range []struct {
		maxOnDemand    int32
		onDemand, spot int
	}{{5, 5, 0}, {3, 3, 2}, {0, 0, 5}, {7, 5, 0}} {
		t.Run(fmt.Sprintf("maxOnDemand %d", tc.maxOnDemand), func(t *testing.T) {
			var held []int32
			onDemand, spot := 0, 0
			for i := range 5 {
				p := Choose(tc.maxOnDemand, held)
				if p.OnDemand {
					if p.Slot != int32(i) {
						t.Errorf("pod %d got slot %d: the first pods go on-demand, in slot order", i, p.Slot)
					}
					held = append(held, p.Slot)
					onDemand++
				} else {
					spot++
				}
			}
			if onDemand != tc.onDemand || spot != tc.spot {
				t.Errorf("on-demand/spot = %d/%d, want %d/%d", onDemand, spot, tc.onDemand, tc.spot)
			}
		})
	}
}

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int32
		held []int32
		want Place
	}{
		{"first pod", 3, nil, Place{OnDemand: true, Slot: 0}},
		{"a replacement fills the first vacant slot", 3, []int32{0, 2}, Place{OnDemand: true, Slot: 1}},
		{"the first vacant slot, not the next one", 4, []int32{3, 1}, Place{OnDemand: true, Slot: 0}},
		{"full", 3, []int32{0, 1, 2}, Spot},
		{"none allowed", 0, nil, Spot},
		{"a repeated slot still counts as a pod", 3, []int32{0, 0, 1}, Spot},
		{"a repeated slot leaves a vacant one", 3, []int32{0, 0}, Place{OnDemand: true, Slot: 1}},
		{"pods beyond a lowered max count", 2, []int32{0, 5}, Spot},
		{"slots beyond a lowered max hold no place below it", 3, []int32{0, 5}, Place{OnDemand: true, Slot: 1}},
		{"an unreadable slot counts", 2, []int32{-1}, Place{OnDemand: true, Slot: 0}},
		{"unreadable slots fill the count", 2, []int32{-1, -1}, Spot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Choose(tc.max, tc.held); got != tc.want {
				t.Errorf("Choose(%d, %v) = %v, want %v", tc.max, tc.held, got, tc.want)
			}
		})
	}
}

func TestParseMaxOnDemand(t *testing.T) {
	for _, v := range []string{"0", "3", "007", "2147483647"} {
		if _, err := ParseMaxOnDemand(v); err != nil {
			t.Errorf("ParseMaxOnDemand(%q): %v", v, err)
		}
	}
	if n, _ := ParseMaxOnDemand("12"); n != 12 {
		t.Errorf("ParseMaxOnDemand(12) = %d", n)
	}
	for _, v := range []string{"", "three", "-1", "+3", " 3", "3 ", "3.0", "1e3", "2147483648", "99999999999", "0x10", "３"} {
		_, err := ParseMaxOnDemand(v)
		if err == nil {
			t.Errorf("ParseMaxOnDemand(%q) accepted it", v)
			continue
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) || !strings.Contains(err.Error(), protocol.MaxOnDemandAnnotation) {
			t.Errorf("ParseMaxOnDemand(%q): error %q does not name the annotation and the value", v, err)
		}
	}
}

func FuzzParseMaxOnDemand(f *testing.F) {
	for _, s := range []string{"0", "3", "three", "-1", "2147483648", "+1", "007"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, err := ParseMaxOnDemand(v)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) {
				t.Errorf("error %q does not name the value %q", err, v)
			}
			return
		}
		if n < 0 {
			t.Errorf("%q parsed as %d", v, n)
		}
		// What is accepted is plain digits, and reads back the same number.
		if strings.TrimLeft(fmt.Sprint(n), "0") != strings.TrimLeft(v, "0") {
			t.Errorf("%q parsed as %d", v, n)
		}
	})
}

func TestResolve(t *testing.T) {
	policy := &v1alpha1.CapacityTypeSplit{MaxOnDemand: 4, NodeLabel: "example.com/lifecycle", OnDemandValues: []v1alpha1.LabelValue{"normal"}, SpotValues: []v1alpha1.LabelValue{"preemptible", "spot"}}
	ann := func(v string) map[string]string { return map[string]string{protocol.MaxOnDemandAnnotation: v} }
	for _, tc := range []struct {
		name          string
		pod, workload map[string]string
		policy        *v1alpha1.CapacityTypeSplit
		wantMax       int32
		wantOK        bool
		wantLabel     string
		wantProblems  int
	}{
		{"the pod's own first", ann("1"), ann("2"), policy, 1, true, protocol.DefaultCapacityNodeLabel, 0},
		{"then the workload's", nil, ann("2"), policy, 2, true, protocol.DefaultCapacityNodeLabel, 0},
		{"then the policy's", nil, nil, policy, 4, true, "example.com/lifecycle", 0},
		{"none", nil, nil, nil, 0, false, "", 0},
		{"a bad pod annotation is as if absent", ann("three"), ann("2"), nil, 2, true, protocol.DefaultCapacityNodeLabel, 1},
		{"a bad workload annotation is as if absent", nil, ann("-1"), policy, 4, true, "example.com/lifecycle", 1},
		{"both bad, no policy: no split", ann("x"), ann("y"), nil, 0, false, "", 2},
		{"zero is a split", ann("0"), nil, nil, 0, true, protocol.DefaultCapacityNodeLabel, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ok, problems := Resolve(tc.pod, tc.workload, "Deployment", tc.policy)
			if ok != tc.wantOK || cfg.MaxOnDemand != tc.wantMax || cfg.NodeLabel != tc.wantLabel || len(problems) != tc.wantProblems {
				t.Errorf("Resolve = %+v, %v, %v; want max %d, %v, label %q, %d problems", cfg, ok, problems, tc.wantMax, tc.wantOK, tc.wantLabel, tc.wantProblems)
			}
		})
	}
	cfg, _, _ := Resolve(nil, nil, "Deployment", policy)
	if !cmp.Equal(cfg.SpotValues, []string{"preemptible", "spot"}) || !cmp.Equal(cfg.OnDemandValues, []string{"normal"}) {
		t.Errorf("policy values: %+v", cfg)
	}
	cfg, _, _ = Resolve(nil, nil, "Deployment", &v1alpha1.CapacityTypeSplit{MaxOnDemand: 1})
	if cfg.NodeLabel != protocol.DefaultCapacityNodeLabel || !cmp.Equal(cfg.OnDemandValues, []string{"on-demand"}) || !cmp.Equal(cfg.SpotValues, []string{"spot"}) {
		t.Errorf("an undefaulted policy: %+v", cfg)
	}
}

func TestApply(t *testing.T) {
	cfg := DefaultConfig(3, "test")
	req := func(key string, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
	}
	onDemand := req(protocol.DefaultCapacityNodeLabel, "on-demand")
	spot := req(protocol.DefaultCapacityNodeLabel, "spot")
	zone := req("topology.kubernetes.io/zone", "a")
	withTerms := func(terms ...corev1.NodeSelectorTerm) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
		}}}}
	}
	term := func(rs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: rs}
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		place Place
		want  []corev1.NodeSelectorTerm
	}{
		{"no affinity: a new term", &corev1.Pod{}, Place{OnDemand: true, Slot: 0}, []corev1.NodeSelectorTerm{term(onDemand)}},
		{"ANDed into the one term", withTerms(term(zone)), Spot, []corev1.NodeSelectorTerm{term(zone, spot)}},
		{"ANDed into every term", withTerms(term(zone), corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{req("metadata.name", "n1")}}), Place{OnDemand: true, Slot: 1},
			[]corev1.NodeSelectorTerm{term(zone, onDemand), {MatchFields: []corev1.NodeSelectorRequirement{req("metadata.name", "n1")}, MatchExpressions: []corev1.NodeSelectorRequirement{onDemand}}}},
		{"the author's requirement on the label gives way", withTerms(term(spot, zone)), Place{OnDemand: true, Slot: 0}, []corev1.NodeSelectorTerm{term(zone, onDemand)}},
		{"preferred terms are left alone", &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: term(zone)}},
		}}}}, Spot, []corev1.NodeSelectorTerm{term(spot)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			preferred := tc.pod.DeepCopy().Spec.Affinity
			if !Apply(tc.pod, cfg, tc.place) {
				t.Fatal("Apply reported no change")
			}
			got := tc.pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("terms (-want +got):\n%s", diff)
			}
			if preferred != nil && preferred.NodeAffinity != nil {
				if diff := cmp.Diff(preferred.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution, tc.pod.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution); diff != "" {
					t.Errorf("preferred terms changed:\n%s", diff)
				}
			}
			if got, ok := PlaceOf(tc.pod.Labels); !ok || got != tc.place {
				t.Errorf("PlaceOf(labels) = %v, %v; want %v", got, ok, tc.place)
			}
			if Apply(tc.pod, cfg, tc.place) {
				t.Error("Apply again changed the pod")
			}
		})
	}

	t.Run("deletion cost: on-demand above spot, the lowest slot highest; the author's replaced", func(t *testing.T) {
		cost := func(p Place) string {
			pod := &corev1.Pod{}
			pod.Annotations = map[string]string{protocol.PodDeletionCostAnnotation: "5000000"}
			Apply(pod, cfg, p)
			return pod.Annotations[protocol.PodDeletionCostAnnotation]
		}
		if got := cost(Spot); got != "1" {
			t.Errorf("spot cost %s", got)
		}
		if a, b := DeletionCost(Place{OnDemand: true, Slot: 0}), DeletionCost(Place{OnDemand: true, Slot: 1}); a <= b || b <= DeletionCost(Spot) {
			t.Errorf("on-demand costs %d, %d, spot %d", a, b, DeletionCost(Spot))
		}
		if got := DeletionCost(Place{OnDemand: true, Slot: 2_000_000}); got <= DeletionCost(Spot) {
			t.Errorf("a huge slot costs %d, not above spot", got)
		}
		if got := cost(Place{OnDemand: true, Slot: 2}); got != "999998" {
			t.Errorf("on-demand slot 2 cost %s", got)
		}
	})

	t.Run("a pod moved to spot loses its slot label", func(t *testing.T) {
		pod := &corev1.Pod{}
		Apply(pod, cfg, Place{OnDemand: true, Slot: 2})
		Apply(pod, cfg, Spot)
		if _, ok := pod.Labels[protocol.OnDemandSlotLabel]; ok {
			t.Error("slot label kept")
		}
		if got := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; !cmp.Equal(got, []corev1.NodeSelectorTerm{term(spot)}) {
			t.Errorf("terms %v", got)
		}
	})
}

func TestPlaceOf(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   Place
		ok     bool
	}{
		{map[string]string{protocol.CapacityTypeLabel: "on-demand", protocol.OnDemandSlotLabel: "2"}, Place{OnDemand: true, Slot: 2}, true},
		{map[string]string{protocol.CapacityTypeLabel: "on-demand", protocol.OnDemandSlotLabel: "x"}, Place{OnDemand: true, Slot: -1}, true},
		{map[string]string{protocol.CapacityTypeLabel: "on-demand"}, Place{OnDemand: true, Slot: -1}, true},
		{map[string]string{protocol.CapacityTypeLabel: "spot"}, Spot, true},
		{map[string]string{protocol.CapacityTypeLabel: "other"}, Place{}, false},
		{nil, Place{}, false},
	} {
		if got, ok := PlaceOf(tc.labels); got != tc.want || ok != tc.ok {
			t.Errorf("PlaceOf(%v) = %v, %v; want %v, %v", tc.labels, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRebalance(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	od := func(name string, slot int32, age int) Member {
		return Member{Name: name, Place: Place{OnDemand: true, Slot: slot}, Placed: true, Created: t0.Add(-time.Duration(age) * time.Minute), ReadySince: t0.Add(-time.Hour)}
	}
	sp := func(name string, age int) Member {
		return Member{Name: name, Place: Spot, Placed: true, Created: t0.Add(-time.Duration(age) * time.Minute), ReadySince: t0.Add(-time.Hour)}
	}
	unplaced := func(name string, age int) Member {
		return Member{Name: name, Created: t0.Add(-time.Duration(age) * time.Minute), ReadySince: t0.Add(-time.Hour)}
	}
	for _, tc := range []struct {
		name string
		max  int32
		pods []Member
		want string // "" for none
	}{
		{"matching", 3, []Member{od("a", 0, 5), od("b", 1, 5), od("c", 2, 5), sp("d", 5), sp("e", 5)}, ""},
		{"all on-demand, fewer pods than max", 7, []Member{od("a", 0, 5), od("b", 1, 5)}, ""},
		{"all spot, max 0", 0, []Member{sp("a", 5), sp("b", 5)}, ""},
		{"too many on-demand: the highest slot", 1, []Member{od("a", 0, 5), od("c", 2, 1), od("b", 1, 9), sp("d", 5)}, "c"},
		{"too many on-demand: an unreadable slot first", 2, []Member{od("a", 0, 5), od("x", -1, 9), od("b", 1, 9)}, "x"},
		{"a repeated slot: the youngest of it", 1, []Member{od("a", 0, 5), od("b", 0, 1)}, "b"},
		{"too few on-demand with spot: the youngest spot", 3, []Member{od("a", 0, 5), sp("d", 5), sp("e", 1), sp("f", 3)}, "e"},
		{"too few on-demand, no spot", 3, []Member{od("a", 0, 5)}, ""},
		{"unplaced pods are replaced before spot ones", 3, []Member{od("a", 0, 5), sp("d", 1), unplaced("u", 5)}, "u"},
		{"unplaced pods are replaced even when on-demand is full", 1, []Member{od("a", 0, 5), unplaced("u", 5), sp("d", 1)}, "u"},
		{"too many on-demand come first", 1, []Member{od("a", 0, 5), od("b", 1, 5), unplaced("u", 5)}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why, ok := Rebalance(tc.max, tc.pods)
			if !ok {
				got.Name = ""
			}
			if got.Name != tc.want {
				t.Errorf("Rebalance = %q (%s), want %q", got.Name, why, tc.want)
			}
			if ok && why == "" {
				t.Error("no reason given")
			}
		})
	}
}

func TestSettled(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ready := Status{Replicas: 3, Generation: 2, ObservedGeneration: 2, Current: 3, Updated: 3, Ready: 3, Available: 3}
	pods := []Member{{Name: "a", ReadySince: t0.Add(-time.Hour)}, {Name: "b", ReadySince: t0.Add(-time.Hour)}, {Name: "c", ReadySince: t0.Add(-time.Hour)}}
	with := func(f func(*Status)) Status { s := ready; f(&s); return s }
	withPod := func(f func(*Member)) []Member {
		out := append([]Member(nil), pods...)
		f(&out[1])
		return out
	}
	for _, tc := range []struct {
		name   string
		status Status
		pods   []Member
		want   bool
	}{
		{"settled", ready, pods, true},
		{"a spec not seen yet", with(func(s *Status) { s.Generation = 3 }), pods, false},
		{"one not ready", with(func(s *Status) { s.Ready = 2 }), pods, false},
		{"one not available", with(func(s *Status) { s.Available = 2 }), pods, false},
		{"one not updated", with(func(s *Status) { s.Updated = 2 }), pods, false},
		{"a surge pod", with(func(s *Status) { s.Current = 4 }), pods, false},
		{"the cache misses a pod the status still counts", ready, pods[:2], false},
		{"a pod being deleted", ready, withPod(func(m *Member) { m.Terminating = true }), false},
		{"a pod not ready", ready, withPod(func(m *Member) { m.ReadySince = time.Time{} }), false},
		{"a pod ready for less than minReadySeconds", ready, withPod(func(m *Member) { m.ReadySince = t0.Add(-5 * time.Second) }), false},
		{"zero replicas", Status{}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Settled(tc.status, tc.pods, 10*time.Second, t0)
			if got != tc.want || (!got && why == "") {
				t.Errorf("Settled = %v (%s), want %v", got, why, tc.want)
			}
		})
	}
}
