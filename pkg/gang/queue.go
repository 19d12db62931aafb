package gang

import (
	"sync"
	"time"
)

// Order ranks gangs that wait: the higher priority first, then the older,
// then by key.
type Order struct {
	Priority int32
	Created  time.Time
}

func (o Order) before(p Order, key, other string) bool {
	switch {
	case o.Priority != p.Priority:
		return o.Priority > p.Priority
	case !o.Created.Equal(p.Created):
		return o.Created.Before(p.Created)
	}
	return key < other
}

// Queue orders the gangs of one source that wait for their places: one at
// a time holds reservations, the first that is not backing off, those the
// targets publish room for (as their last look found) before those they
// do not, each in Order; the others' candidates hold no node meanwhile, so
// two gangs never each hold half of what both need. A gang that fits thus
// never waits behind one that does not, as kube-scheduler places whatever
// gang fits; one that does not fit goes first when none that fits waits.
//
// Gangs behind the first may ride along: one whose targets publish room
// for what it and every gang ahead of it still need (Look.Share adds up
// to 1 at most, each gang ahead telling its own) holds reservations
// beside the first, as kube-scheduler places every gang that fits at
// once, while the first makes progress (it grew, or began its turn,
// within RideFor). The room the targets publish counts no reservation,
// so the shares of the gangs ahead are what contention means there; a
// wrong reading (room taken by others since, or too fragmented for the
// members) costs the first its progress, and the riders then wait their
// turn like any gang: none rides behind that first gang again in this
// turn of its.
//
// A gang stands first until HeadFor has passed since its turn began or
// since it last held more places than before in this turn, and for
// MaxHeadFor at most; one that does not fit stands first for NoFitHeadFor
// after its last progress only (the summaries may not show room freed a
// moment ago; its members find it by reserving). One that makes no
// progress yields: it holds nothing for its backoff (Backoff, doubled at
// each yield up to MaxBackoff, plus up to a fifth at random) and the next
// gang goes first. The zero Queue is not usable: set the durations.
type Queue struct {
	HeadFor, MaxHeadFor, Backoff, MaxBackoff time.Duration
	// NoFitHeadFor, when set, bounds HeadFor for a gang that does not fit.
	NoFitHeadFor time.Duration
	// RideFor is how long after the first gang's last progress the gangs
	// behind it may still ride along; 0: none rides along.
	RideFor time.Duration
	// Jitter returns a number in [0, 1): a yield's backoff is lengthened
	// by up to a fifth of it, so that yielded gangs do not come back
	// together.
	Jitter func() float64
	// Yielded, when set, is called for each yield, under the queue's lock.
	Yielded func(key string, y Yield)
	// Live, when set, reports whether gang key still has a member waiting
	// for its place. A gang that has none (its pods deleted, or all of
	// them placed without a look that said so) leaves the queue when it
	// would go first, rather than stand first until forgotten. Called
	// under the queue's lock.
	Live func(key string) bool

	mu    sync.Mutex
	gangs map[string]*waiting
}

// Yield is what a gang that gave up its turn held then.
type Yield struct {
	// Held is the places it held at its last look, Most the most it held
	// in the turn.
	Held, Most int
	// NoFit is set when its last look found too little room for it.
	NoFit bool
	// For is how long it backs off; Attempt counts its yields so far.
	For     time.Duration
	Attempt int
}

// Look is what one member's look at its gang tells the queue.
type Look struct {
	Order Order
	// Held is the places the gang holds toward its size.
	Held int
	// Fits is set when the targets publish room for the whole gang, or
	// room it cannot know (Choice.Fits).
	Fits bool
	// Share is the part of the room its targets publish that the gang
	// still needs: its members not bound over the whole members of room
	// there (Choice.Room); 0 when it cannot be told (a target publishes
	// no room, or the gang is to stand in one cluster, where the room of
	// several is no measure). A gang with no share neither rides along
	// nor lets the gangs behind it ride.
	Share float64
}

type waiting struct {
	order Order
	seen  time.Time
	share float64
	// noFit is set when its last look found that the targets publish too
	// little room for it (Choice.Fits). Its own reservations take none of
	// the room a target publishes, which counts bound pods only.
	noFit bool
	// held is the places the gang holds, as its last look counted them.
	held int
	// headSince is when its turn began (zero: it is not first);
	// progressAt when, in this turn, it last held more places than ever
	// before in it (most).
	headSince, progressAt time.Time
	most                  int
	// stalled is set when, first, it made no progress for RideFor: no
	// gang rides along behind it for the rest of its turn (the riders may
	// hold what it lacks; letting them back each time it grows would
	// have them take it again).
	stalled    bool
	yieldUntil time.Time
	backoff    time.Duration
	// yields counts the turns it gave up: its attempt (Attempt).
	yields int
}

// forgetAfter is how long a gang no member looked at stays in the queue:
// its members went without saying. A waiting member looks at least every
// few seconds.
const forgetAfter = time.Minute

// Turn says whether gang key, waiting as its look l found it, may hold
// reservations now: it goes first, or rides along; when not, head is the
// gang that goes first ("" when key backs off with none ahead). again is
// when the answer may change. Each member's look at its gang calls it.
func (q *Queue) Turn(key string, l Look, now time.Time) (mine bool, head string, again time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gangs == nil {
		q.gangs = map[string]*waiting{}
	}
	w := q.gangs[key]
	if w == nil {
		w = &waiting{backoff: q.Backoff}
		q.gangs[key] = w
	}
	w.order, w.seen, w.held, w.noFit, w.share = l.Order, now, l.Held, !l.Fits, l.Share
	for k, g := range q.gangs {
		if now.Sub(g.seen) > forgetAfter {
			delete(q.gangs, k)
		}
	}
	for {
		head = q.head(now)
		if head == "" {
			return false, "", w.yieldUntil.Sub(now)
		}
		for k, g := range q.gangs {
			if k != head {
				// A turn is counted from when it last began.
				g.headSince = time.Time{}
			}
		}
		h := q.gangs[head]
		if h.headSince.IsZero() {
			h.headSince, h.progressAt, h.most, h.stalled = now, now, h.held, false
		}
		if h.held > h.most {
			h.progressAt, h.most = now, h.held
		}
		if q.left(h, now) > 0 {
			break
		}
		// It stood first long enough and did not complete: it yields.
		wait := h.backoff + time.Duration(float64(h.backoff)*0.2*q.jitter())
		h.yieldUntil, h.headSince = now.Add(wait), time.Time{}
		h.backoff = min(2*h.backoff, q.MaxBackoff)
		h.yields++
		if q.Yielded != nil {
			q.Yielded(head, Yield{Held: h.held, Most: h.most, NoFit: h.noFit, For: wait, Attempt: h.yields})
		}
	}
	left := q.left(q.gangs[head], now)
	if head == key {
		return true, head, left
	}
	if w.yieldUntil.After(now) {
		return false, head, min(left, w.yieldUntil.Sub(now))
	}
	if ride := q.rides(key, w, head, now); ride > 0 {
		return true, head, min(left, ride)
	}
	return false, head, left
}

// rides is how long gang key (w) may hold reservations beside the first
// gang head: while the shares of every gang ahead of it and its own add
// up to the room (1), and head progressed within RideFor. 0: it waits.
func (q *Queue) rides(key string, w *waiting, head string, now time.Time) time.Duration {
	h := q.gangs[head]
	left := q.RideFor - now.Sub(h.progressAt)
	if left <= 0 {
		h.stalled = true
	}
	if h.stalled || w.share <= 0 {
		return 0
	}
	sum := w.share
	for k, g := range q.gangs {
		if k == key || g.yieldUntil.After(now) || !g.before(w, k, key) {
			continue
		}
		if g.share <= 0 {
			return 0
		}
		sum += g.share
	}
	if sum > 1 {
		return 0
	}
	return left
}

// left is how long the head h keeps its turn.
func (q *Queue) left(h *waiting, now time.Time) time.Duration {
	headFor := q.HeadFor
	if h.noFit && q.NoFitHeadFor > 0 {
		headFor = min(headFor, q.NoFitHeadFor)
	}
	left := headFor - now.Sub(h.progressAt)
	if q.MaxHeadFor > 0 {
		left = min(left, q.MaxHeadFor-now.Sub(h.headSince))
	}
	return left
}

// head is the first gang not backing off; "" when every one does. A gang
// that would go first and is no longer live leaves the queue.
func (q *Queue) head(now time.Time) string {
	for {
		head := ""
		for k, g := range q.gangs {
			if g.yieldUntil.After(now) {
				continue
			}
			if head == "" || g.before(q.gangs[head], k, head) {
				head = k
			}
		}
		if head == "" || q.Live == nil || q.Live(head) {
			return head
		}
		delete(q.gangs, head)
	}
}

// before reports whether gang w (of key) goes before gang o (of other):
// one that fits before one that does not, then by Order.
func (w *waiting) before(o *waiting, key, other string) bool {
	if w.noFit != o.noFit {
		return o.noFit
	}
	return w.order.before(o.order, key, other)
}

// BacksOff reports whether gang key gave up its turn and waits out its
// backoff at now: it holds no node until then.
func (q *Queue) BacksOff(key string, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.gangs[key]
	return ok && w.yieldUntil.After(now)
}

func (q *Queue) jitter() float64 {
	if q.Jitter == nil {
		return 0
	}
	return q.Jitter()
}

// Done takes gang key out of the queue: it is placed, or running. It
// returns the gang's order when it was queued.
func (q *Queue) Done(key string) (Order, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.gangs[key]
	if !ok {
		return Order{}, false
	}
	delete(q.gangs, key)
	return w.order, true
}

// Complete notes that gang key holds places for its whole size now: a
// complete gang is electing its members, and keeps its turn for as long
// as it stays complete (HeadFor counts again from now, and its turn is not
// cut by MaxHeadFor). Its members look at it again within seconds while it
// is, so a gang that stops being complete loses the turn as any other.
func (q *Queue) Complete(key string, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.gangs[key]
	if !ok {
		return
	}
	// Complete, it holds its places: it fits.
	w.seen, w.progressAt, w.noFit = now, now, false
	if !w.headSince.IsZero() {
		w.headSince = now
	}
}

// Attempt is how many turns gang key gave up while it waited: a gang that
// could not be completed draws other targets on its next attempt
// (DrawKey). A gang the queue does not hold is at its first (0).
func (q *Queue) Attempt(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w, ok := q.gangs[key]; ok {
		return w.yields
	}
	return 0
}

// Len is the number of gangs in the queue.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.gangs)
}
