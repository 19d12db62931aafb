package gang

import (
	"testing"
	"time"
)

func TestQueue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	yields := map[string]int{}
	q := &Queue{HeadFor: time.Minute, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute, Yielded: func(k string) { yields[k]++ }}
	older := Order{Created: t0}
	younger := Order{Created: t0.Add(time.Second)}
	urgent := Order{Priority: 10, Created: t0.Add(2 * time.Second)}

	turn := func(key string, o Order, at time.Duration) (bool, string) {
		t.Helper()
		mine, head, again := q.Turn(key, o, t0.Add(at))
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
