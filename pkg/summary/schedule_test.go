package summary

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

const interval = 5 * time.Second

// burst touches a summary n times, evenly over span starting at start,
// looks for due summaries after every touch and writes them (content
// always changed). It returns the write times.
func burst(s *writeSchedule, name string, start time.Time, span time.Duration, n int) []time.Time {
	var writes []time.Time
	for i := range n {
		now := start.Add(span * time.Duration(i) / time.Duration(n))
		s.Touch(name)
		for _, due := range s.Due(now) {
			s.Wrote(due, now)
			writes = append(writes, now)
		}
	}
	return writes
}

// drain runs the schedule until nothing is touched and returns the write
// times, jumping the clock to each Next as the publisher's loop sleeps.
func drain(s *writeSchedule) []time.Time {
	var writes []time.Time
	for {
		next, ok := s.Next()
		if !ok {
			return writes
		}
		for _, due := range s.Due(next) {
			s.Wrote(due, next)
			writes = append(writes, next)
		}
	}
}

func TestScheduleBurstWithinAnIntervalIsOneWrite(t *testing.T) {
	s := newWriteSchedule(interval)
	s.Touch("s")
	if due := s.Due(t0); !slices.Equal(due, []string{"s"}) {
		t.Fatalf("first touch: due %v, want [s] at once", due)
	}
	s.Wrote("s", t0)

	// 1,000 changes in 2 s, starting 1 s after the last write.
	if writes := burst(s, "s", t0.Add(time.Second), 2*time.Second, 1000); len(writes) != 0 {
		t.Fatalf("burst inside the interval wrote %d times at %v, want none before the interval ends", len(writes), writes)
	}
	next, ok := s.Next()
	if !ok || !next.Equal(t0.Add(interval)) {
		t.Fatalf("Next = %v, %v; want %v (an interval after the last write)", next, ok, t0.Add(interval))
	}
	if writes := drain(s); !slices.Equal(writes, []time.Time{t0.Add(interval)}) {
		t.Fatalf("after the burst: writes at %v, want exactly one at %v", writes, t0.Add(interval))
	}
}

func TestScheduleBurstFromIdleIsAtMostOneWritePerInterval(t *testing.T) {
	s := newWriteSchedule(interval)
	// 1,000 changes in 2 s after a long quiet time, then 1,000 more 4 s later.
	writes := burst(s, "s", t0, 2*time.Second, 1000)
	writes = append(writes, burst(s, "s", t0.Add(4*time.Second), 2*time.Second, 1000)...)
	writes = append(writes, drain(s)...)
	want := []time.Time{t0, t0.Add(interval), t0.Add(2 * interval)}
	if !slices.Equal(writes, want) {
		t.Fatalf("writes at %v, want %v: the first change at once, then one per interval while changes come", writes, want)
	}
	for i := 1; i < len(writes); i++ {
		if d := writes[i].Sub(writes[i-1]); d < interval {
			t.Errorf("writes %d and %d are %v apart, less than the interval", i-1, i, d)
		}
	}
}

func TestScheduleUnchangedContentCostsNothing(t *testing.T) {
	s := newWriteSchedule(interval)
	s.Touch("s")
	s.Due(t0)
	s.Wrote("s", t0)

	// Touched, due, looked at, not written: content unchanged.
	s.TouchAll()
	if due := s.Due(t0.Add(interval)); !slices.Equal(due, []string{"s"}) {
		t.Fatalf("due %v, want [s]", due)
	}
	if _, ok := s.Next(); ok {
		t.Fatal("nothing touched, yet Next reports a time")
	}
	// A real change soon after is not held back by the look that wrote
	// nothing: the last write is more than an interval old.
	s.Touch("s")
	if due := s.Due(t0.Add(interval + time.Second)); !slices.Equal(due, []string{"s"}) {
		t.Fatalf("change after a look without a write: due %v, want [s] at once", due)
	}
}

func TestScheduleSummariesAreIndependent(t *testing.T) {
	s := newWriteSchedule(interval)
	s.Touch("a")
	s.Due(t0)
	s.Wrote("a", t0)
	// b is new a second later: written at once, not held back by a.
	s.Touch("b")
	s.TouchAll()
	if due := s.Due(t0.Add(time.Second)); !slices.Equal(due, []string{"b"}) {
		t.Fatalf("due %v, want [b]", due)
	}
	s.Wrote("b", t0.Add(time.Second))
	if due := s.Due(t0.Add(interval)); !slices.Equal(due, []string{"a"}) {
		t.Fatalf("due %v, want [a] an interval after its write", due)
	}
	s.Forget("a")
	s.Touch("b")
	if next, ok := s.Next(); !ok || !next.Equal(t0.Add(time.Second+interval)) {
		t.Fatalf("Next = %v, %v after forgetting a; want b's %v", next, ok, t0.Add(time.Second+interval))
	}
}

func TestScheduleRetryWaitsAnInterval(t *testing.T) {
	s := newWriteSchedule(interval)
	s.Touch("s")
	s.Due(t0)
	s.Retry("s", t0) // the write failed
	if due := s.Due(t0.Add(interval - time.Millisecond)); len(due) != 0 {
		t.Fatalf("retried before the interval: due %v", due)
	}
	if due := s.Due(t0.Add(interval)); !slices.Equal(due, []string{"s"}) {
		t.Fatalf("due %v, want [s] retried an interval after the failure", due)
	}
}
