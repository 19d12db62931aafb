package candidate

import (
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TestWeighedSightings: sightings read once weigh as often as a caller
// needs: without a prospect every view weighs 1 and none is overdue; with
// one, each takes its target's weight, and a candidate that has waited
// longer than its target's answer time is overdue, one that has not, or
// that waits for nothing, is not. A target that stopped answering (its
// answer time raised by the wait of this very candidate, the oldest there)
// is judged by the answers it gave: the candidate is overdue. One that
// keeps answering others (busy) is not stalled: it is not.
func TestWeighedSightings(t *testing.T) {
	fast, slow, idle := &target.Target{Name: "fast"}, &target.Target{Name: "slow"}, &target.Target{Name: "idle"}
	stalled, busy := &target.Target{Name: "stalled"}, &target.Target{Name: "busy"}
	created := time.Now().Add(-time.Minute)
	sightings := []Sighting{
		{Target: fast, View: View{Name: "fast", Serves: true, Covers: true, Holds: true, Weight: 1}, waitingSince: created},
		{Target: slow, View: View{Name: "slow", Serves: true, Covers: true, Holds: true, Weight: 1}, waitingSince: created},
		{Target: idle, View: View{Name: "idle", Serves: true, Covers: true, Weight: 1}},
		{Target: stalled, View: View{Name: "stalled", Serves: true, Covers: true, Holds: true, Weight: 1}, waitingSince: created},
		{Target: busy, View: View{Name: "busy", Serves: true, Covers: true, Holds: true, Weight: 1}, waitingSince: created},
	}
	for i, v := range Weighed(sightings, nil) {
		if v != sightings[i].View {
			t.Errorf("unweighed view of %s is %+v, want it as sighted, %+v", v.Name, v, sightings[i].View)
		}
	}
	prospect := func(tg *target.Target) Prospect {
		switch tg {
		case fast:
			return Prospect{Room: 8, Answer: time.Second, Answered: time.Second, Quiet: time.Minute, Sure: true}
		case slow:
			return Prospect{Room: 2, Answer: time.Hour, Answered: time.Hour, Quiet: time.Minute}
		case stalled:
			return Prospect{Room: 8, Answer: time.Minute, Answered: time.Second, Quiet: time.Minute}
		case busy:
			return Prospect{Room: 8, Answer: time.Minute, Answered: time.Second, Quiet: time.Second}
		}
		return Prospect{Room: -1}
	}
	views := Weighed(sightings, prospect)
	want := []View{
		{Name: "fast", Serves: true, Covers: true, Holds: true, Weight: prospect(fast).Weight(), Sure: true, Overdue: true},
		{Name: "slow", Serves: true, Covers: true, Holds: true, Weight: prospect(slow).Weight()},
		{Name: "idle", Serves: true, Covers: true, Weight: prospect(idle).Weight()},
		{Name: "stalled", Serves: true, Covers: true, Holds: true, Weight: prospect(stalled).Weight(), Overdue: true},
		{Name: "busy", Serves: true, Covers: true, Holds: true, Weight: prospect(busy).Weight()},
	}
	for i := range want {
		if views[i] != want[i] {
			t.Errorf("weighed view %d:\n got %+v\nwant %+v", i, views[i], want[i])
		}
	}
}
