package candidate

import (
	"testing"
	"time"
)

// TestSureOf: one candidate is enough only where room beyond what is in
// flight, a record of answers, speed and almost no misses all say so.
func TestSureOf(t *testing.T) {
	for _, tc := range []struct {
		name           string
		room           float64
		waiting, ended int
		answer         time.Duration
		misses         float64
		want           bool
	}{
		{"room, answers fast, no misses", 100, 10, 50, time.Second, 0, true},
		{"room unknown", -1, 0, 50, time.Second, 0, false},
		{"room taken by what is in flight", 100, 95, 50, time.Second, 0, false},
		{"nothing heard yet", 100, 0, 0, 0, 0, false},
		{"slow", 100, 0, 50, 3 * time.Second, 0, false},
		{"missed lately", 100, 0, 50, time.Second, 0.2, false},
	} {
		if got := SureOf(tc.room, tc.waiting, tc.ended, tc.answer, tc.misses); got != tc.want {
			t.Errorf("%s: SureOf = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := OverdueAfterFor(0); got != OverdueAfter {
		t.Errorf("overdue after %s for an unknown answer time, want %s", got, OverdueAfter)
	}
	if got := OverdueAfterFor(2 * time.Second); got != 6*time.Second {
		t.Errorf("overdue after %s for a 2 s answer time, want 6s", got)
	}
}
