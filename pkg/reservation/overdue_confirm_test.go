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
		if wait := c.confirmOverdue(uid, overdueClock, vs); wait != wantWait || marked(vs) != wantMarked {
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

	// The process stalls (paused) after it first saw t2 overdue: what it
	// saw before may have changed unread, so it counts again from the
	// stall's end, noticed first by the watch's own silence, then by its
	// late tick.
	tick := func(d time.Duration) {
		for end := clock.Now().Add(d); clock.Now().Before(end); {
			clock.SetTime(clock.Now().Add(stallTick))
			c.stalls.note(clock.Now())
		}
	}
	tick(time.Second)
	step(overdueConfirm+3*time.Second, []string{"t2"}, overdueConfirm, 0)
	c.stalls.note(clock.Now())
	tick(overdueConfirm / 2)
	if wait := c.confirmOverdue(uid, overdueClock, views("t2")); wait != overdueConfirm/2 {
		t.Errorf("half the confirmation after the stall: wait %s, want %s", wait, overdueConfirm/2)
	}
	tick(overdueConfirm / 2)
	step(0, []string{"t2"}, 0, 1)
}

// TestStallWatch: a tick later than a stall's worth marks a stall's end;
// while the watch has not ticked for that long, the stall ends now; a
// watch that never ran tells of none.
func TestStallWatch(t *testing.T) {
	var s stallWatch
	at := time.Unix(1000, 0)
	if got := s.endedAt(at.Add(time.Hour)); !got.IsZero() {
		t.Errorf("a watch that never ran: stall ended at %s", got)
	}
	s.note(at)
	s.note(at.Add(stallTick))
	if got := s.endedAt(at.Add(stallTick + stallLate)); !got.IsZero() {
		t.Errorf("ticking on time: stall ended at %s", got)
	}
	late := at.Add(stallTick + stallTick + stallLate + time.Millisecond)
	if got := s.endedAt(late); !got.Equal(late) {
		t.Errorf("a tick overdue by more than a stall: ended at %s, want now (%s)", got, late)
	}
	s.note(late)
	if got := s.endedAt(late.Add(stallTick)); !got.Equal(late) {
		t.Errorf("after the late tick: ended at %s, want %s", got, late)
	}
}

// TestOverdueClocksCountApart: the fallback groups' and a pre-election's
// confirmations count apart from the fan-out window's. A round whose
// window finds nothing overdue (its selected targets widened past the
// silent group) must not start the count of the silent group again, or
// the pod would flip back to that group every other round.
func TestOverdueClocksCountApart(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	c := &Controller{Clock: clock}
	const uid = "pod-1"
	silent := func() []candidate.View { return []candidate.View{{Name: "near", Holds: true, Overdue: true}} }
	if wait := c.confirmOverdue(uid, fallbackClock, silent()); wait != overdueConfirm {
		t.Fatalf("first seen overdue: wait %s, want %s", wait, overdueConfirm)
	}
	for _, clk := range []steadyClock{overdueClock, preElectionClock} {
		clock.SetTime(clock.Now().Add(overdueConfirm / 4))
		c.confirmOverdue(uid, clk, []candidate.View{{Name: "far", Holds: true, Waiting: true}})
	}
	clock.SetTime(clock.Now().Add(overdueConfirm / 2))
	if vs := silent(); c.confirmOverdue(uid, fallbackClock, vs) != 0 || !vs[0].Overdue {
		t.Errorf("after %s on the fallback clock, the other clocks stopped meanwhile: not confirmed", overdueConfirm)
	}
}
