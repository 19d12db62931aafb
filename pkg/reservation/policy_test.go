package reservation

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/placementpolicy"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TestWeighSelfFromTheView: a self target publishes no ClusterSummary; its
// room comes from this cluster's view when there is one, so that a cluster
// whose pods did not fit at home (localFirst) draws itself rarely.
func TestWeighSelfFromTheView(t *testing.T) {
	newTarget := func(name string, self bool) *target.Target { return unreachable(t, name, self) }
	p := &plan{
		selected: []*target.Target{newTarget("home", true), newTarget("away", false)},
		needs:    placementpolicy.Needs{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}},
	}
	free := func(cpu string, pods int64, ok bool) func() (corev1.ResourceList, bool) {
		return func() (corev1.ResourceList, bool) {
			return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourcePods: *resource.NewQuantity(pods, resource.DecimalSI)}, ok
		}
	}
	for _, tc := range []struct {
		name     string
		selfFree func() (corev1.ResourceList, bool)
		want     float64
	}{
		{"no view", nil, -1},
		{"a view not synced", free("4", 10, false), -1},
		{"room for four by cpu", free("2", 10, true), 4},
		{"full by pods", free("2", 0, true), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := p.weigh(tc.selfFree)
			if got := ps["home"].Room; got != tc.want {
				t.Errorf("home's room = %g, want %g", got, tc.want)
			}
			// away (no summary) takes the average of those known: home's.
			if got := ps["away"].Room; got != tc.want {
				t.Errorf("away's room = %g, want %g (the known average)", got, tc.want)
			}
		})
	}
}

// TestStalePins: a pending candidate pinned to a domain the spread has
// closed, in a target that has another open, is stale; one pinned to an
// open domain, bound, in the elected target or in a target of one domain
// is not.
func TestStalePins(t *testing.T) {
	newTarget := func(name string) *target.Target { return unreachable(t, name, false) }
	pinned := func(zone string, bound bool) *corev1.Pod {
		c := &corev1.Pod{}
		candidate.Pin(c, []string{"zone"}, []string{zone}, []bool{true})
		if bound {
			c.Spec.NodeName = "n1"
		}
		return c
	}
	p := &plan{
		pins:   map[string]placement.Domain{"wide": {"b"}, "elected": {"b"}, "open": {"b"}},
		closed: map[string]map[string]bool{"wide": {placement.Domain{"a"}.Key(): true}, "elected": {placement.Domain{"a"}.Key(): true}, "full": {placement.Domain{"a"}.Key(): true}},
	}
	placements := []candidate.Placement{
		{Target: newTarget("wide"), Candidate: pinned("a", false)},
		{Target: newTarget("elected"), Candidate: pinned("a", false)},
		{Target: newTarget("open"), Candidate: pinned("b", false)},
		{Target: newTarget("full"), Candidate: pinned("a", false)},
		{Target: newTarget("bound"), Candidate: pinned("a", true)},
	}
	p.pins["bound"] = placement.Domain{"b"}
	p.closed["bound"] = map[string]bool{placement.Domain{"a"}.Key(): true}
	var got []string
	for _, s := range p.stalePins(placements, "elected") {
		got = append(got, s.Target.Name)
	}
	if fmt.Sprint(got) != "[wide]" {
		t.Errorf("stale %v, want [wide]", got)
	}
}

// TestLookForOverdue: a pod whose selected targets have each failed it or
// wait to answer is looked at again when the waiting ones may be overdue
// (nothing else wakes a pod whose targets say nothing); not while a
// selected target has no candidate yet, or holds a reservation, or once
// every one has failed or is overdue (the plan widened then).
func TestLookForOverdue(t *testing.T) {
	newTarget := func(name string) *target.Target { return unreachable(t, name, false) }
	near, near2, far := newTarget("near"), newTarget("near2"), newTarget("far")
	invited := []*target.Target{near, near2, far}
	heard := func(t *target.Target) candidate.Prospect {
		// near answers in 2 s on average: its bar is 6 s.
		if t == near {
			return candidate.Prospect{Answered: 2 * time.Second}
		}
		return candidate.Prospect{}
	}
	waiting := candidate.View{Holds: true, Waiting: true}
	failed := candidate.View{Holds: true, Failed: true}
	for _, tc := range []struct {
		name  string
		views [2]candidate.View
		want  time.Duration
	}{
		{"both wait", [2]candidate.View{waiting, waiting}, candidate.OverdueAfter},
		{"near waits, near2 failed", [2]candidate.View{waiting, failed}, 6 * time.Second},
		{"near2 has no candidate yet", [2]candidate.View{waiting, {}}, 0},
		{"near2 holds a reservation", [2]candidate.View{waiting, {Holds: true}}, 0},
		{"both failed", [2]candidate.View{failed, failed}, 0},
		{"near overdue, near2 failed", [2]candidate.View{{Holds: true, Overdue: true}, failed}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			views := []candidate.View{tc.views[0], tc.views[1], {}}
			for i, tg := range invited {
				views[i].Name = tg.Name
			}
			if got := lookForOverdue([]*target.Target{near, near2}, views, invited, heard); got != tc.want {
				t.Errorf("look again in %s, want %s", got, tc.want)
			}
		})
	}
}

// unreachable is a target named name that nothing answers at.
func unreachable(t *testing.T, name string, self bool) *target.Target {
	t.Helper()
	tg, err := target.New(target.Config{Name: name, REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src", Self: self})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}
