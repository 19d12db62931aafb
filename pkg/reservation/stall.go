package reservation

import (
	"context"
	"sync"
	"time"
)

// A process that was paused (SIGSTOP, a frozen VM) or starved of CPU wakes
// with its timers due at once and its caches behind what happened
// meanwhile: its first rounds would judge waits that spanned the stall on
// answers it has not read yet (confirmOverdue). stallWatch notices such a
// stall, as etcd notices a heartbeat sent late: a ticker that ticks late.
const (
	stallTick = 250 * time.Millisecond
	// stallLate is how late a tick must be to count as a stall.
	stallLate = time.Second
)

// stallWatch tells when this process last came out of a stall.
type stallWatch struct {
	mu sync.Mutex
	// tick is when the watch last ticked; zero while it does not run.
	tick time.Time
	// ended is when the last stall ended, as the watch noticed it.
	ended time.Time
}

// run ticks until ctx ends (a manager's Runnable), noting each tick at
// now: the clock the rounds judge waits by (Controller.now), so that the
// stalls it tells of compare with their times.
func (s *stallWatch) run(ctx context.Context, now func() time.Time) error {
	t := time.NewTicker(stallTick)
	defer t.Stop()
	s.note(now())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.note(now())
		}
	}
}

// note records a tick at now, and a stall when it came late.
func (s *stallWatch) note(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tick.IsZero() && now.Sub(s.tick) > stallTick+stallLate {
		s.ended = now
	}
	s.tick = now
}

// endedAt is when the last stall ended: now, when the watch itself has
// not ticked for longer than a stall (the process is coming out of one,
// and the watch has not run yet); zero when none was noticed, or the watch
// does not run.
func (s *stallWatch) endedAt(now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tick.IsZero() && now.Sub(s.tick) > stallTick+stallLate {
		return now
	}
	return s.ended
}
