package reservation

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
)

// TestOverdueIsActedOnOnceConfirmed: a candidate found overdue counts only
// once this process has seen the same targets overdue for overdueConfirm
// (a process resumed from a pause finds every candidate that waited
// through it overdue until its caches catch up). Until then the round
// sees it as waiting and is told when to look again; a change of which
// targets are overdue starts the count again, and none overdue stops it.
func TestOverdueIsActedOnOnceConfirmed(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	c := &Controller{Clock: clock}
	const uid = "pod-1"
	views := func(overdue ...string) []candidate.View {
		vs := []candidate.View{{Name: "t1", Holds: true, Waiting: true}, {Name: "t2", Holds: true, Waiting: true}, {Name: "t3"}}
		for i := range vs {
			for _, o := range overdue {
				if vs[i].Name == o {
					vs[i].Overdue = true
				}
			}
		}
		return vs
	}
	marked := func(vs []candidate.View) (n int) {
		for _, v := range vs {
			if v.Overdue {
				n++
			}
		}
		return n
	}
	step := func(d time.Duration, overdue []string, wantWait time.Duration, wantMarked int) {
		t.Helper()
		clock.SetTime(clock.Now().Add(d))
		vs := views(overdue...)
		if wait := c.confirmOverdue(uid, vs); wait != wantWait || marked(vs) != wantMarked {
			t.Errorf("at +%s, overdue %v: wait %s with %d marked, want %s with %d", d, overdue, wait, marked(vs), wantWait, wantMarked)
		}
	}
	step(0, []string{"t2"}, overdueConfirm, 0)
	step(time.Second, []string{"t2"}, overdueConfirm-time.Second, 0)
	step(overdueConfirm-time.Second, []string{"t2"}, 0, 1)
	// Another target overdue too: counted again from now.
	step(time.Second, []string{"t1", "t2"}, overdueConfirm, 0)
	step(overdueConfirm, []string{"t1", "t2"}, 0, 2)
	// t2 answered (its cache caught up): none overdue, the count stops.
	step(time.Second, nil, 0, 0)
	step(time.Second, []string{"t2"}, overdueConfirm, 0)
}
