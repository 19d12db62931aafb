package split

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func newAssigner(c *fakeCache, rec *fakeRecorder, now func() time.Time) *Assigner {
	return &Assigner{Pods: c, Workloads: c, Recorder: rec, Log: logr.Discard(), Now: now}
}

// TestAssignerConcurrentBurst: a ReplicaSet creating many pods at once,
// admitted concurrently by one replica, before the cache shows any of
// them, never gets more than maxOnDemand on-demand places, and gets
// exactly the first slots.
func TestAssignerConcurrentBurst(t *testing.T) {
	for _, lagging := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache lagging %v", lagging), func(t *testing.T) {
			c := &fakeCache{workload: webWorkload(maxOnDemand("3"))}
			a := newAssigner(c, &fakeRecorder{}, nil)
			const pods = 50
			var mu sync.Mutex
			slots := map[int32]int{}
			spot := 0
			var wg sync.WaitGroup
			for i := range pods {
				wg.Go(func() {
					pod := deploymentPod(nil, nil)
					changed, err := a.Assign(t.Context(), pod, false)
					if err != nil || !changed {
						t.Errorf("Assign: changed %v, %v", changed, err)
						return
					}
					p, ok := PlaceOf(pod.Labels)
					if !ok {
						t.Error("no place")
						return
					}
					if !lagging {
						// The cache shows the pod as soon as it is made.
						c.add(Member{Name: fmt.Sprint(i), UID: types.UID(fmt.Sprint(i)), Place: p, Placed: true})
					}
					mu.Lock()
					defer mu.Unlock()
					if p.OnDemand {
						slots[p.Slot]++
					} else {
						spot++
					}
				})
			}
			wg.Wait()
			if len(slots) != 3 || slots[0] != 1 || slots[1] != 1 || slots[2] != 1 || spot != pods-3 {
				t.Errorf("on-demand slots %v and %d spot, want slots 0, 1, 2 once each and %d spot", slots, spot, pods-3)
			}
		})
	}
}

func TestAssignerReplacementFillsVacantSlot(t *testing.T) {
	c := &fakeCache{workload: webWorkload(maxOnDemand("3"))}
	c.set(
		Member{Name: "a", Place: Place{OnDemand: true, Slot: 0}, Placed: true},
		Member{Name: "b", Place: Place{OnDemand: true, Slot: 1}, Placed: true, Terminating: true}, // being replaced
		Member{Name: "c", Place: Place{OnDemand: true, Slot: 2}, Placed: true},
		Member{Name: "d", Place: Spot, Placed: true},
	)
	a := newAssigner(c, &fakeRecorder{}, nil)
	pod := deploymentPod(nil, nil)
	if _, err := a.Assign(t.Context(), pod, false); err != nil {
		t.Fatal(err)
	}
	if p, _ := PlaceOf(pod.Labels); p != (Place{OnDemand: true, Slot: 1}) {
		t.Errorf("replacement got %v, want on-demand slot 1", p)
	}
	next := deploymentPod(nil, nil)
	if _, err := a.Assign(t.Context(), next, false); err != nil {
		t.Fatal(err)
	}
	if p, _ := PlaceOf(next.Labels); p != Spot {
		t.Errorf("the next pod got %v, want spot (slot 1 is held for the replacement)", p)
	}
}

func TestAssignerPendingPlaces(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	place := func(a *Assigner) Place {
		t.Helper()
		pod := deploymentPod(nil, nil)
		if _, err := a.Assign(t.Context(), pod, false); err != nil {
			t.Fatal(err)
		}
		p, _ := PlaceOf(pod.Labels)
		return p
	}

	t.Run("a place not seen in time is given again", func(t *testing.T) {
		c := &fakeCache{workload: webWorkload(maxOnDemand("1"))}
		a := newAssigner(c, &fakeRecorder{}, clock)
		if p := place(a); p != (Place{OnDemand: true, Slot: 0}) {
			t.Fatalf("first pod %v", p)
		}
		if p := place(a); p != Spot {
			t.Fatalf("second pod %v, want spot while slot 0 is pending", p)
		}
		now = now.Add(PendingTTL + time.Second)
		if p := place(a); p != (Place{OnDemand: true, Slot: 0}) {
			t.Errorf("after the pending place expired: %v, want slot 0 (its pod was never made)", p)
		}
	})

	t.Run("once the cache shows the pod, the cache holds the place", func(t *testing.T) {
		c := &fakeCache{workload: webWorkload(maxOnDemand("2"))}
		a := newAssigner(c, &fakeRecorder{}, clock)
		if p := place(a); p != (Place{OnDemand: true, Slot: 0}) {
			t.Fatalf("first pod %v", p)
		}
		c.set(Member{Name: "a", Place: Place{OnDemand: true, Slot: 0}, Placed: true})
		if p := place(a); p != (Place{OnDemand: true, Slot: 1}) {
			t.Fatalf("second pod %v, want slot 1 (counted once, not pending and cached)", p)
		}
		c.set(Member{Name: "b", Place: Place{OnDemand: true, Slot: 1}, Placed: true}) // a deleted
		if p := place(a); p != (Place{OnDemand: true, Slot: 0}) {
			t.Errorf("after the pod of slot 0 went: %v, want slot 0 at once", p)
		}
	})

	t.Run("a dry run holds nothing", func(t *testing.T) {
		c := &fakeCache{workload: webWorkload(maxOnDemand("1"))}
		a := newAssigner(c, &fakeRecorder{}, clock)
		pod := deploymentPod(nil, nil)
		if _, err := a.Assign(t.Context(), pod, true); err != nil {
			t.Fatal(err)
		}
		if p, _ := PlaceOf(pod.Labels); p != (Place{OnDemand: true, Slot: 0}) {
			t.Fatalf("dry run %v, want the place it would get", p)
		}
		if p := place(a); p != (Place{OnDemand: true, Slot: 0}) {
			t.Errorf("after a dry run: %v, want slot 0", p)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if len(a.states) != 1 {
			t.Errorf("%d workload states kept, want the one with a pending place", len(a.states))
		}
	})
}

type fixedPolicy struct{ split *v1alpha1.CapacityTypeSplit }

func (p fixedPolicy) CapacityTypeFor(*corev1.Pod) *v1alpha1.CapacityTypeSplit { return p.split }

func TestAssignerSources(t *testing.T) {
	policy := fixedPolicy{&v1alpha1.CapacityTypeSplit{MaxOnDemand: 0, NodeLabel: "example.com/lifecycle", OnDemandValues: []v1alpha1.LabelValue{"normal"}, SpotValues: []v1alpha1.LabelValue{"preemptible"}}}
	for _, tc := range []struct {
		name               string
		pod                map[string]string // the pod's annotations
		workload           map[string]string
		policy             Policies
		labels             map[string]string
		want               string // the pod's required values, "" for unchanged
		wantWarning        string
		templateCarriesOne bool
	}{
		{name: "the pod's annotation", pod: maxOnDemand("1"), workload: maxOnDemand("0"), want: "node.kubernetes.io/capacity in [on-demand]"},
		{name: "the Deployment's annotation", workload: maxOnDemand("0"), want: "node.kubernetes.io/capacity in [spot]"},
		{name: "the policy", policy: policy, want: "example.com/lifecycle in [preemptible]"},
		{name: "no split", want: ""},
		{name: "opted out", labels: map[string]string{protocol.CapacitySplitLabel: "false"}, workload: maxOnDemand("1"), want: ""},
		{name: "a bad annotation: told, unsplit", workload: maxOnDemand("three"), want: "", wantWarning: `"three"`},
		{name: "a bad pod annotation: told, as if unannotated", pod: maxOnDemand("-2"), workload: maxOnDemand("1"), want: "node.kubernetes.io/capacity in [on-demand]", wantWarning: `"-2"`},
		{name: "a place copied into the template is no place", labels: map[string]string{protocol.CapacityTypeLabel: "spot"}, workload: maxOnDemand("1"), want: "node.kubernetes.io/capacity in [on-demand]", templateCarriesOne: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := webWorkload(tc.workload)
			if tc.templateCarriesOne {
				w.TemplateLabels[protocol.CapacityTypeLabel] = "spot"
			}
			c := &fakeCache{workload: w}
			rec := &fakeRecorder{}
			a := newAssigner(c, rec, nil)
			a.Policies = tc.policy
			pod := deploymentPod(tc.labels, tc.pod)
			changed, err := a.Assign(t.Context(), pod, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := requiredOf(pod); got != tc.want || changed != (tc.want != "") {
				t.Errorf("required %q (changed %v), want %q", got, changed, tc.want)
			}
			events := rec.all()
			if tc.wantWarning == "" {
				if len(events) != 0 {
					t.Errorf("events %v", events)
				}
				return
			}
			if len(events) != 1 || events[0].eventType != corev1.EventTypeWarning || events[0].reason != ReasonInvalidMaxOnDemand ||
				events[0].name != "web" || !strings.Contains(events[0].kind, "Deployment") ||
				!strings.Contains(events[0].note, protocol.MaxOnDemandAnnotation) || !strings.Contains(events[0].note, tc.wantWarning) {
				t.Errorf("events %+v, want one Warning %s on Deployment web naming the annotation and %s", events, ReasonInvalidMaxOnDemand, tc.wantWarning)
			}
		})
	}
}

func TestAssignerLeavesPodsWithoutWorkload(t *testing.T) {
	c := &fakeCache{workload: webWorkload(maxOnDemand("1"))}
	a := newAssigner(c, &fakeRecorder{}, nil)
	pod := deploymentPod(nil, maxOnDemand("1"))
	pod.OwnerReferences = nil
	if changed, err := a.Assign(t.Context(), pod, false); changed || err != nil {
		t.Errorf("a pod of no workload: changed %v, %v", changed, err)
	}
	if c.lists != 0 {
		t.Error("listed pods for a pod of no workload")
	}
}

func TestAssignerReinvocationKeepsThePlace(t *testing.T) {
	c := &fakeCache{workload: webWorkload(maxOnDemand("1"))}
	a := newAssigner(c, &fakeRecorder{}, nil)
	pod := deploymentPod(nil, nil)
	if _, err := a.Assign(t.Context(), pod, false); err != nil {
		t.Fatal(err)
	}
	lists := c.lists
	changed, err := a.Assign(t.Context(), pod, false)
	if err != nil || changed {
		t.Errorf("reinvocation: changed %v, %v", changed, err)
	}
	if c.lists != lists {
		t.Error("reinvocation chose a place again")
	}
	if p, _ := PlaceOf(pod.Labels); p != (Place{OnDemand: true, Slot: 0}) {
		t.Errorf("place %v", p)
	}
}

// requiredOf renders the pod's required node affinity, one term.
func requiredOf(pod *corev1.Pod) string {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	var out []string
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range term.MatchExpressions {
			out = append(out, fmt.Sprintf("%s %s %v", r.Key, strings.ToLower(string(r.Operator)), r.Values))
		}
	}
	return strings.Join(out, "; ")
}
