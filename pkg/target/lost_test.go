package target

import (
	"testing"
	"time"
)

func TestLostDelegatesHoldBack(t *testing.T) {
	start := time.Unix(10000, 0)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	tests := []struct {
		name   string
		losses []time.Duration
		now    time.Duration
		held   bool
	}{
		{name: "none", now: 0},
		{name: "fewer than the threshold", losses: []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}, now: 4 * time.Second},
		{name: "the threshold within the window", losses: []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second}, now: 41 * time.Second, held: true},
		{name: "still held just before the hold ends", losses: []time.Duration{0, 1, 2, 3, 4}, now: 4 + LostHoldBack - 1, held: true},
		{name: "released when the hold ends", losses: []time.Duration{0, 1, 2, 3, 4}, now: 4 + LostHoldBack},
		{name: "spread wider than the window", losses: []time.Duration{0, time.Minute, 2*time.Minute + time.Second, 3 * time.Minute, 4 * time.Minute}, now: 4*time.Minute + time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l lostDelegates
			for _, d := range tt.losses {
				l.record(at(d))
			}
			n, until, held := l.heldBack(at(tt.now))
			if held != tt.held {
				t.Fatalf("held back %v (%d losses, until %v), want %v", held, n, until, tt.held)
			}
			if held && !until.Equal(at(tt.losses[len(tt.losses)-1]).Add(LostHoldBack)) {
				t.Errorf("held until %v, want %s after the last loss", until, LostHoldBack)
			}
		})
	}
}

// A loss long ago is forgotten: the list does not grow for ever.
func TestLostDelegatesForget(t *testing.T) {
	var l lostDelegates
	start := time.Unix(10000, 0)
	for i := range 100 {
		l.record(start.Add(time.Duration(i) * time.Hour))
	}
	if len(l.at) != 1 {
		t.Errorf("%d losses remembered, want the last only", len(l.at))
	}
}
