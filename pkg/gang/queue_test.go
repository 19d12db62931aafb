package gang

import (
	"testing"
	"time"
)

func TestQueue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	yields := map[string]int{}
	q := &Queue{HeadFor: time.Minute, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute, Yielded: func(k string, _ Yield) { yields[k]++ }}
	older := Order{Created: t0}
	younger := Order{Created: t0.Add(time.Second)}
	urgent := Order{Priority: 10, Created: t0.Add(2 * time.Second)}

	turn := func(key string, o Order, at time.Duration) (bool, string) {
		t.Helper()
		mine, head, again := q.Turn(key, Look{Order: o, Fits: true}, t0.Add(at))
		if again <= 0 {
			t.Fatalf("%s at %s: look again in %s", key, at, again)
		}
		return mine, head
	}
	// The younger gang comes first, then the older one: the older goes
	// first from then on.
	if mine, _ := turn("young", younger, 0); !mine {
		t.Fatal("alone, the younger gang does not go first")
	}
	if mine, _ := turn("old", older, time.Second); !mine {
		t.Fatal("the older gang does not go first")
	}
	if mine, head := turn("young", younger, 2*time.Second); mine || head != "old" {
		t.Fatalf("the younger gang: mine %v, head %q; want the older one first", mine, head)
	}
	// A higher priority goes before age.
	if mine, _ := turn("urgent", urgent, 3*time.Second); !mine {
		t.Fatal("the gang of higher priority does not go first")
	}
	q.Done("urgent")
	// The older gang stands first for HeadFor without completing: it
	// yields for its backoff, and the younger goes first.
	if mine, _ := turn("old", older, 4*time.Second); !mine {
		t.Fatal("the older gang lost its turn when the urgent one was done")
	}
	// Waiting members look every few seconds.
	turn("old", older, 40*time.Second)
	if mine, head := turn("young", younger, 70*time.Second); !mine || head != "young" {
		t.Fatalf("after the older gang stood first a minute: young mine %v, head %q", mine, head)
	}
	if mine, _ := turn("old", older, 71*time.Second); mine {
		t.Fatal("the older gang holds places during its backoff")
	}
	// The younger completes: the older, backing off, waits out its
	// backoff, then goes first again.
	q.Done("young")
	if mine, head := turn("old", older, 80*time.Second); mine || head != "" {
		t.Fatalf("during its backoff, alone: mine %v, head %q", mine, head)
	}
	if mine, _ := turn("old", older, 101*time.Second); !mine {
		t.Fatal("after its backoff the older gang does not go first again")
	}
	turn("old", older, 130*time.Second)
	// Its next yield backs off twice as long.
	if mine, _ := turn("old", older, 162*time.Second); mine {
		t.Fatal("the older gang did not yield after a second minute first")
	}
	turn("old", older, 190*time.Second)
	if mine, _ := turn("old", older, 162*time.Second+59*time.Second); mine {
		t.Fatal("the second backoff is not twice the first")
	}
	if mine, _ := turn("old", older, 162*time.Second+61*time.Second); !mine {
		t.Fatal("after its second backoff the older gang does not go first")
	}
	if yields["old"] != 2 || len(yields) != 1 {
		t.Errorf("yields %v, want the older gang's two", yields)
	}
	if _, ok := q.Done("young"); ok {
		t.Error("a gang done twice was still queued")
	}
	if o, ok := q.Done("old"); !ok || !o.Created.Equal(t0) || q.Len() != 0 {
		t.Errorf("Done(old) = %v, %v; %d left", o, ok, q.Len())
	}
	turn("old", older, 224*time.Second)
	// A gang nobody looks at is forgotten.
	if mine, _ := turn("young", younger, 162*time.Second+61*time.Second+3*time.Minute); !mine {
		t.Fatal("a gang gone unseen for minutes still goes first")
	}
}

// A gang that holds more places keeps its turn: it stands first until
// HeadFor has passed since it last grew, and MaxHeadFor at most.
func TestQueueKeepsTheTurnOfAGangThatGrows(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := &Queue{HeadFor: time.Minute, MaxHeadFor: 5 * time.Minute, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute}
	old, young := Order{Created: t0}, Order{Created: t0.Add(time.Second)}
	look := func(key string, o Order, held int, at time.Duration) bool {
		t.Helper()
		mine, _, again := q.Turn(key, Look{Order: o, Held: held, Fits: true}, t0.Add(at))
		if again <= 0 {
			t.Fatalf("%s at %s: look again in %s", key, at, again)
		}
		return mine
	}
	look("young", young, 0, 0)
	if !look("old", old, 1, 0) {
		t.Fatal("the older gang does not go first")
	}
	// It grows every 50 s: it keeps its turn past a minute.
	for at, held := 50*time.Second, 2; at < 4*time.Minute; at, held = at+50*time.Second, held+1 {
		if !look("old", old, held, at) {
			t.Fatalf("at %s, holding %d places, the older gang lost its turn", at, held)
		}
		if look("young", young, 0, at+time.Second) {
			t.Fatalf("at %s the younger gang goes first while the older grows", at)
		}
	}
	// Losing places and making them again is not progress: a minute after
	// it last grew (at 200 s, to 5), it yields.
	look("old", old, 3, 220*time.Second)
	look("old", old, 5, 250*time.Second)
	if look("old", old, 5, 259*time.Second) != true {
		t.Fatal("the older gang yielded before a minute without progress")
	}
	if look("old", old, 5, 261*time.Second) {
		t.Fatal("the older gang kept its turn a minute after it last grew")
	}
	if !look("young", young, 0, 262*time.Second) {
		t.Fatal("the younger gang does not go first once the older yielded")
	}

	// However it grows, a turn lasts MaxHeadFor at most.
	q = &Queue{HeadFor: time.Minute, MaxHeadFor: 5 * time.Minute, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute}
	held := 0
	for at := time.Duration(0); at < 5*time.Minute; at += 30 * time.Second {
		held++
		if !look("old", old, held, at) {
			t.Fatalf("at %s, growing, the gang lost its turn", at)
		}
	}
	if look("old", old, held+1, 5*time.Minute) {
		t.Fatal("a gang that grows kept its turn past MaxHeadFor")
	}
}

// TestQueueAttempts: each turn a gang gives up is a new attempt (its
// next draw of targets), and a complete gang keeps its turn past HeadFor
// and MaxHeadFor for as long as it stays complete.
func TestQueueAttempts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := &Queue{HeadFor: time.Minute, MaxHeadFor: 5 * time.Minute, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute}
	o := Order{Created: t0}
	if got := q.Attempt("g"); got != 0 {
		t.Fatalf("a gang not queued is at attempt %d", got)
	}
	q.Turn("g", Look{Order: o, Held: 1, Fits: true}, t0)
	q.Turn("g", Look{Order: o, Held: 1, Fits: true}, t0.Add(61*time.Second)) // no progress for a minute: yields
	if got := q.Attempt("g"); got != 1 {
		t.Fatalf("after one yield: attempt %d, want 1", got)
	}
	// Back after its backoff, it completes and stays complete: it keeps
	// its turn for ten minutes, well past MaxHeadFor.
	at := 100 * time.Second
	if mine, _, _ := q.Turn("g", Look{Order: o, Held: 1, Fits: true}, t0.Add(at)); !mine {
		t.Fatal("after its backoff the gang does not go first")
	}
	q.Turn("other", Look{Order: Order{Created: t0.Add(time.Second)}, Fits: true}, t0.Add(at))
	for ; at < 700*time.Second; at += 5 * time.Second {
		q.Complete("g", t0.Add(at))
		if mine, _, _ := q.Turn("other", Look{Order: Order{Created: t0.Add(time.Second)}, Fits: true}, t0.Add(at)); mine {
			t.Fatalf("the other gang went first at %s while g was complete", at)
		}
	}
	if got := q.Attempt("g"); got != 1 {
		t.Fatalf("a complete gang yielded: attempt %d", got)
	}
}

// TestQueueLetsAGangThatFitsGoBeforeOnesThatDoNot: a younger gang that
// fits goes before two older ones that no target publishes room for; with
// none that fits, those stand first for NoFitHeadFor each, not HeadFor,
// oldest first; the reading of fit is the last look's, whatever the gang
// holds.
func TestQueueLetsAGangThatFitsGoBeforeOnesThatDoNot(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := &Queue{HeadFor: time.Minute, NoFitHeadFor: 10 * time.Second, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute}
	big := Order{Created: t0}
	bigger := Order{Created: t0.Add(time.Second)}
	small := Order{Created: t0.Add(2 * time.Second)}
	look := func(at time.Duration) string {
		t.Helper()
		now := t0.Add(at)
		q.Turn("big", Look{Order: big, Fits: false}, now)
		q.Turn("bigger", Look{Order: bigger, Fits: false}, now)
		_, head, _ := q.Turn("small", Look{Order: small, Fits: true}, now)
		return head
	}
	// The gang that fits goes first at once, though younger: two that do
	// not would have kept it waiting NoFitHeadFor each.
	if head := look(0); head != "small" {
		t.Fatalf("head %q, want the gang that fits", head)
	}
	if q.BacksOff("big", t0) || q.BacksOff("small", t0) {
		t.Fatal("a gang that gave up no turn backs off")
	}
	// Once it is done, the older of those that do not fit goes first, and
	// stands first NoFitHeadFor before the next.
	q.Done("small")
	if mine, head, _ := q.Turn("big", Look{Order: big, Fits: false}, t0.Add(time.Second)); !mine {
		t.Fatalf("head %q once the gang that fits is done, want the oldest that does not", head)
	}
	if mine, head, _ := q.Turn("bigger", Look{Order: bigger, Fits: false}, t0.Add(12*time.Second)); !mine {
		t.Fatalf("head %q NoFitHeadFor after the oldest went first, want the next", head)
	}
	if !q.BacksOff("big", t0.Add(12*time.Second)) {
		t.Fatal("the gang that gave up its turn does not back off")
	}
	// A gang that fit when it held nothing and holds places now, when the
	// targets come to publish too little room for it (the room of its own
	// reservations is not taken from what they publish: room went to
	// others), stands first NoFitHeadFor after its last progress, not
	// HeadFor.
	q2 := &Queue{HeadFor: time.Minute, NoFitHeadFor: 10 * time.Second, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute}
	q2.Turn("g", Look{Order: big, Fits: true}, t0)
	q2.Turn("g", Look{Order: big, Held: 3, Fits: false}, t0.Add(time.Second))
	if mine, _, again := q2.Turn("g", Look{Order: big, Held: 3, Fits: false}, t0.Add(5*time.Second)); !mine || again > 6*time.Second {
		t.Fatalf("a gang holding places that no longer fits: mine %v, again %s; want its turn for NoFitHeadFor after its progress", mine, again)
	}
	if mine, _, _ := q2.Turn("g", Look{Order: big, Held: 3, Fits: false}, t0.Add(12*time.Second)); mine {
		t.Fatal("a gang holding places that no longer fits kept its turn past NoFitHeadFor")
	}
	// One that reads fit again while it holds places keeps HeadFor.
	q3 := &Queue{HeadFor: time.Minute, NoFitHeadFor: 10 * time.Second, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute}
	q3.Turn("g", Look{Order: big, Fits: false}, t0)
	q3.Turn("g", Look{Order: big, Held: 3, Fits: true}, t0.Add(time.Second))
	if mine, _, again := q3.Turn("g", Look{Order: big, Held: 3, Fits: true}, t0.Add(20*time.Second)); !mine || again < 30*time.Second {
		t.Fatalf("a gang holding places that fits: mine %v, again %s; want its turn for HeadFor", mine, again)
	}
}

// TestQueueDropsAGangThatNoLongerWaits: an older gang whose members are
// gone (deleted while it waited, or placed) does not stand first until it
// is forgotten: the younger one goes first at its next look, and the
// older leaves the queue.
func TestQueueDropsAGangThatNoLongerWaits(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	live := map[string]bool{"old": true, "young": true}
	q := &Queue{HeadFor: time.Minute, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute, Live: func(k string) bool { return live[k] }}
	old, young := Order{Created: t0}, Order{Created: t0.Add(time.Second)}
	q.Turn("old", Look{Order: old, Held: 2, Fits: true}, t0)
	if mine, head, _ := q.Turn("young", Look{Order: young, Fits: true}, t0.Add(time.Second)); mine || head != "old" {
		t.Fatalf("while the older gang waits: mine %v, head %q; want the older first", mine, head)
	}
	live["old"] = false
	if mine, _, _ := q.Turn("young", Look{Order: young, Fits: true}, t0.Add(2*time.Second)); !mine {
		t.Fatal("the younger gang does not go first once the older has no member waiting")
	}
	if n := q.Len(); n != 1 {
		t.Fatalf("%d gangs queued, want 1: the older left", n)
	}
}

// TestQueueLetsGangsThatFitBesideTheFirstRideAlong: gangs behind the
// first hold reservations beside it while every gang ahead of them and
// their own need fit the room their targets publish, and the first makes
// progress; the one whose need would take the room past it waits, and so
// does every gang behind it when a gang ahead cannot tell its need.
func TestQueueLetsGangsThatFitBesideTheFirstRideAlong(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := &Queue{HeadFor: time.Minute, RideFor: 10 * time.Second, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute}
	order := func(i int) Order { return Order{Created: t0.Add(time.Duration(i) * time.Second)} }
	look := func(key string, i int, held int, share float64, at time.Duration) (bool, string) {
		t.Helper()
		mine, head, again := q.Turn(key, Look{Order: order(i), Held: held, Fits: true, Share: share}, t0.Add(at))
		if again <= 0 {
			t.Fatalf("%s at %s: look again in %s", key, at, again)
		}
		return mine, head
	}
	look("a", 0, 0, 0.4, 0)
	if mine, head := look("b", 1, 0, 0.3, 0); !mine || head != "a" {
		t.Fatalf("b, whose need fits beside a's: mine %v, head %q; want it to ride along behind a", mine, head)
	}
	if mine, _ := look("c", 2, 0, 0.3, 0); !mine {
		t.Fatal("c, whose need with a's and b's makes the room exactly, does not ride along")
	}
	if mine, head := look("d", 3, 0, 0.1, 0); mine || head != "a" {
		t.Fatalf("d, whose need takes the room past what a, b and c need: mine %v, head %q; want it to wait", mine, head)
	}
	// The first stalls: the riders wait RideFor after its last progress.
	look("a", 0, 5, 0.4, time.Second)
	if mine, _ := look("b", 1, 0, 0.3, 10*time.Second); !mine {
		t.Fatal("b stopped riding along before RideFor after the first's progress")
	}
	if mine, _ := look("b", 1, 0, 0.3, 12*time.Second); mine {
		t.Fatal("b rides along behind a first gang that made no progress for RideFor")
	}
	// Once it stalled, none rides behind it again in this turn, though it
	// grows: the riders may hold what it lacks.
	look("a", 0, 6, 0.4, 13*time.Second)
	if mine, _ := look("b", 1, 0, 0.3, 14*time.Second); mine {
		t.Fatal("b rides along again behind a first gang that stalled in this turn")
	}
	// Its turn ends (it is placed): b goes first, and c rides behind it.
	q.Done("a")
	if mine, head := look("b", 1, 0, 0.3, 15*time.Second); !mine || head != "b" {
		t.Fatalf("b once a is done: mine %v, head %q", mine, head)
	}
	if mine, _ := look("c", 2, 0, 0.3, 15*time.Second); !mine {
		t.Fatal("c does not ride along behind the next first gang")
	}
	// A gang ahead that cannot tell its need (a target publishes no room)
	// keeps the gangs behind it waiting; one with no share does not ride.
	look("c", 2, 0, 0, 16*time.Second)
	if mine, _ := look("d", 3, 0, 0.1, 16*time.Second); mine {
		t.Fatal("d rides along behind a gang whose need is not known")
	}
	look("c", 2, 0, 0.3, 16*time.Second)
	if mine, _ := look("d", 3, 0, 0, 16*time.Second); mine {
		t.Fatal("a gang whose need is not known rides along")
	}
	if mine, _ := look("d", 3, 0, 0.1, 16*time.Second); !mine {
		t.Fatal("d, whose need fits beside b's and c's, does not ride along")
	}
	// A gang backing off holds nothing: it does not count ahead of others.
	q2 := &Queue{HeadFor: time.Minute, RideFor: 10 * time.Second, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute}
	q = q2
	look("a", 0, 1, 0.9, 0)
	look("a", 0, 1, 0.9, 61*time.Second) // a minute without progress: yields
	look("b", 1, 0, 0.5, 62*time.Second)
	if mine, head := look("c", 2, 0, 0.5, 62*time.Second); !mine || head != "b" {
		t.Fatalf("c behind b with a backing off: mine %v, head %q; want it riding along behind b", mine, head)
	}
	// Without RideFor, none rides along.
	q = &Queue{HeadFor: time.Minute, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute}
	look("a", 0, 0, 0.1, 0)
	if mine, _ := look("b", 1, 0, 0.1, 0); mine {
		t.Fatal("b rides along with RideFor unset")
	}
}
