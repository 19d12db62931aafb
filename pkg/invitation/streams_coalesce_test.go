package invitation

import (
	"testing"
	"time"
)

var coalesceStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestStreamsCoalesceWaits: how long each change of one namespace's
// delegates waits before its streams Role is written. A change after a
// quiet spell is written at once; while changes keep coming, each write
// they schedule waits twice the one before, 100 ms up to 1 s; a change
// while a write is still to come waits for that one; and a second
// without a change after the last write brings the wait back to 100 ms.
func TestStreamsCoalesceWaits(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type change struct {
		at   time.Duration // since the first change
		wait time.Duration // want
	}
	for _, tc := range []struct {
		name    string
		changes []change
	}{
		{name: "a lone change, at once", changes: []change{{0, 0}}},
		{
			name: "a burst: the waits double up to 1 s",
			changes: []change{
				{0, 0},
				{ms(10), ms(100)}, // written at 110
				{ms(50), ms(60)},  // with the write at 110
				{ms(120), ms(200)},
				{ms(330), ms(400)},
				{ms(740), ms(800)},
				{ms(1550), ms(1000)}, // written at 2550
				{ms(2560), ms(1000)},
				{ms(3570), ms(1000)},
			},
		},
		{
			name: "a second quiet after a write: at once, then 100 ms again",
			changes: []change{
				{0, 0},
				{ms(10), ms(100)},   // written at 110, next wait 200
				{ms(1110), 0},       // 1 s quiet after 110
				{ms(1120), ms(100)}, // not 200
			},
		},
		{
			name: "not quite a second quiet: coalesced, the wait grows",
			changes: []change{
				{0, 0},
				{ms(10), ms(100)},
				{ms(1109), ms(200)},
			},
		},
		{
			name: "a trickle, changes 500 ms apart: they share writes up to 1 s apart",
			changes: []change{
				{0, 0},
				{ms(500), ms(100)},   // at 600, next wait 200
				{ms(1000), ms(200)},  // at 1200
				{ms(1500), ms(400)},  // at 1900
				{ms(2000), ms(800)},  // at 2800
				{ms(2500), ms(300)},  // with the write at 2800
				{ms(3000), ms(1000)}, // at 4000
				{ms(3500), ms(500)},  // with it
			},
		},
		{
			name: "quiet after the cap: at once, then 100 ms again",
			changes: []change{
				{0, 0},
				{ms(10), ms(100)},    // at 110
				{ms(120), ms(200)},   // at 320
				{ms(330), ms(400)},   // at 730
				{ms(740), ms(800)},   // at 1540
				{ms(1550), ms(1000)}, // at 2550, next wait 1 s
				{ms(3549), ms(1000)}, // 999 ms after 2550: at 4549
				{ms(5549), 0},        // 1 s quiet after 4549
				{ms(5550), ms(100)},
			},
		},
		{
			name: "lone changes far apart, each at once",
			changes: []change{
				{0, 0},
				{ms(10), ms(100)},
				{ms(1200), 0},
				{ms(5000), 0},
				{ms(9000), 0},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := streamsCoalescer{}
			key := streamsKey{id: "clustersource.c1", namespace: "shop"}
			var at time.Duration
			for _, ch := range tc.changes {
				at = ch.at
				if got := c.delay(key, coalesceStart.Add(at)); got != ch.wait {
					t.Fatalf("a change at %v waits %v, want %v", at, got, ch.wait)
				}
			}
			// Another namespace's Role is its own: its first change is
			// written at once whatever this one's burst.
			other := streamsKey{id: "clustersource.c1", namespace: "web"}
			if got := c.delay(other, coalesceStart.Add(at)); got != 0 {
				t.Fatalf("another namespace's first change waits %v", got)
			}
		})
	}
}

// TestStreamsCoalesceBurst: a namespace whose delegates change every
// 2.5 ms for 10 s (4,000 changes) gets a write about every second after
// the waits have grown, about 10 + log2(10) in all, not one per 100 ms;
// and no change waits more than 1 s for its write.
func TestStreamsCoalesceBurst(t *testing.T) {
	const (
		every    = 2500 * time.Microsecond
		duration = 10 * time.Second
	)
	c := streamsCoalescer{}
	key := streamsKey{id: "clustersource.c1", namespace: "shop"}
	// The work queue keeps one ready time for a waiting key: writes are
	// the distinct ready times.
	writes := map[time.Time]bool{}
	for at := time.Duration(0); at < duration; at += every {
		now := coalesceStart.Add(at)
		wait := c.delay(key, now)
		if wait < 0 || wait > streamsCoalesceMax {
			t.Fatalf("a change at %v waits %v, more than %v", at, wait, streamsCoalesceMax)
		}
		writes[now.Add(wait)] = true
	}
	if most := int(duration/streamsCoalesceMax) + 5; len(writes) > most {
		t.Errorf("%v of changes every %v cost %d writes, want at most %d", duration, every, len(writes), most)
	}
	t.Logf("%v of changes every %v: %d writes", duration, every, len(writes))
}

// TestStreamsCoalescePrune: set drops an invitation's keys that are quiet
// or of namespaces it no longer covers, and forget all of its keys, never
// another invitation's. A key dropped while quiet is written at once, as
// it would have been.
func TestStreamsCoalescePrune(t *testing.T) {
	c := streamsCoalescer{}
	busy := streamsKey{id: "a", namespace: "shop"}
	quiet := streamsKey{id: "a", namespace: "web"}
	left := streamsKey{id: "a", namespace: "old"}
	others := streamsKey{id: "b", namespace: "shop"}
	for _, k := range []streamsKey{busy, quiet, left, others} {
		c.delay(k, coalesceStart)
	}
	later := coalesceStart.Add(time.Second)
	c.delay(busy, later)
	c.delay(left, later)
	c.prune("a", []string{"shop", "web"}, later)
	for k, want := range map[streamsKey]bool{busy: true, quiet: false, left: false, others: true} {
		if _, kept := c[k]; kept != want {
			t.Errorf("after set, key %v kept: %v, want %v", k, kept, want)
		}
	}
	if got := c.delay(quiet, later); got != 0 {
		t.Errorf("a quiet key dropped waits %v", got)
	}
	c.prune("a", nil, time.Time{})
	if _, kept := c[others]; len(c) != 1 || !kept {
		t.Errorf("after forget, keys %v, want only %v", c, others)
	}
}
