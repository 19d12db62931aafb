package target

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

const (
	// LostThreshold delegates lost within LostWindow hold a target back:
	// a target that deletes (or loses) the delegates of this source's
	// pods would otherwise feed their controllers an endless stream of
	// failed pods, each replacement sent to the same target.
	LostThreshold = 5
	// LostWindow is the span in which LostThreshold losses hold a target
	// back.
	LostWindow = 2 * time.Minute
	// LostHoldBack is how long after its last loss a target held back
	// gets no new pod.
	LostHoldBack = 5 * time.Minute
)

// lostDelegates remembers when the delegates of this source's pods
// vanished in one target (the virtual node failed their pods with
// DelegateLost). It is kept in memory: a restarted agent starts afresh,
// which at worst lets LostThreshold more pods fail.
type lostDelegates struct {
	mu sync.Mutex
	at []time.Time
}

// record notes a loss at now.
func (l *lostDelegates) record(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = slices.DeleteFunc(l.at, func(t time.Time) bool { return now.Sub(t) > LostWindow+LostHoldBack })
	l.at = append(l.at, now)
}

// heldBack reports whether the losses hold the target back at now, how
// many fell in the window that did, and until when.
func (l *lostDelegates) heldBack(now time.Time) (n int, until time.Time, held bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.at) == 0 {
		return 0, time.Time{}, false
	}
	last := l.at[len(l.at)-1]
	until = last.Add(LostHoldBack)
	if !now.Before(until) {
		return 0, time.Time{}, false
	}
	for _, t := range l.at {
		if last.Sub(t) <= LostWindow {
			n++
		}
	}
	return n, until, n >= LostThreshold
}

// LostDelegate records that the delegate of one of this source's pods
// vanished in the target without the source deleting it.
func (t *Target) LostDelegate(now time.Time) { t.lost.record(now) }

// HeldBack says why the target gets no new pod at now, "" when it does:
// its virtual node is cordoned (Cordoned), or it lost LostThreshold
// delegates within LostWindow and LostHoldBack has not passed since the
// last (LostHeldBack).
func (t *Target) HeldBack(now time.Time) string {
	if why := t.Cordoned(); why != "" {
		return why
	}
	return t.LostHeldBack(now)
}

// LostHeldBack says why the losses of delegates hold the target back at
// now, "" when they do not.
func (t *Target) LostHeldBack(now time.Time) string {
	n, until, held := t.lost.heldBack(now)
	if !held {
		return ""
	}
	return fmt.Sprintf("%d delegates of this cluster's pods vanished in the target within %s without this cluster deleting them; no new pod is sent there until %s", n, LostWindow, until.UTC().Format(time.RFC3339))
}
