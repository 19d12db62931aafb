package core

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// orderBench is a Manager with shares on over a scheduler whose waiting
// pods are recorded, a cache of candidates the test fills, and a clock the
// test moves; it records the pods the Manager activates.
type orderBench struct {
	t     *testing.T
	m     *Manager
	sched *waitingPods
	pods  cache.Indexer
	now   time.Time

	mu        sync.Mutex
	activated map[string]int
}

const orderPermit, orderBound = 30 * time.Second, 300 * time.Second

func newOrderBench(t *testing.T) *orderBench {
	b := &orderBench{
		t:         t,
		sched:     &waitingPods{waiting: map[types.UID]*fakeWaiting{}, rejected: map[types.UID]string{}},
		pods:      cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		now:       time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC),
		activated: map[string]int{},
	}
	b.m = NewManager(Options{
		PluginName: "p", SchedulerName: "s", PermitTimeout: orderPermit, ShareTimeout: orderBound,
		Now: func() time.Time { return b.now },
		Activate: func(pods []*v1.Pod) {
			b.mu.Lock()
			defer b.mu.Unlock()
			for _, pod := range pods {
				b.activated[pod.Name]++
			}
		},
	}, b.sched, corelisters.NewPodLister(b.pods), NewStateWriter("test", newRecordingPatcher(nil), nil))
	return b
}

// member is a candidate of source cluster's share, of priority (nil for
// none), in the scheduler's cache.
func (b *orderBench) member(name, cluster, share string, priority *int32) *v1.Pod {
	pod := shareMember(name, share)
	pod.Labels[protocol.SourceClusterLabel] = cluster
	pod.Spec.Priority = priority
	if err := b.pods.Add(pod); err != nil {
		b.t.Fatal(err)
	}
	return pod
}

// gang makes n members of cluster's share, named <cluster>-<share>-<i>.
func (b *orderBench) gang(cluster, share string, n int, priority *int32) []*v1.Pod {
	out := make([]*v1.Pod, n)
	for i := range out {
		out[i] = b.member(fmt.Sprintf("%s-%s-%d", cluster, share, i), cluster, share, priority)
	}
	return out
}

// admit runs pod's PreFilter: it must let it through.
func (b *orderBench) admit(pod *v1.Pod) {
	b.t.Helper()
	if reason := b.m.HoldBack(klog.Background(), pod); reason != "" {
		b.t.Fatalf("PreFilter of %s refused it: %s", pod.Name, reason)
	}
}

// wait runs pod's PreFilter, Reserve and Permit, which must ask to wait,
// and makes it wait in Permit.
func (b *orderBench) wait(pods ...*v1.Pod) {
	b.t.Helper()
	for _, pod := range pods {
		b.admit(pod)
		if _, err := b.m.Reserve(context.Background(), pod, "node-1", nil, 1); err != nil {
			b.t.Fatal(err)
		}
		if d := b.m.Permit(context.Background(), pod); d.Verdict != Wait {
			b.t.Fatalf("Permit of %s: %v (%s), want Wait", pod.Name, d.Verdict, d.Reason)
		}
		b.sched.wait(pod)
	}
}

// fail runs pod's PreFilter, then its PostFilter: it found no node.
func (b *orderBench) fail(pod *v1.Pod) int {
	b.t.Helper()
	b.admit(pod)
	return b.m.NoRoom(klog.Background(), pod)
}

// rejected reports which of pods were rejected in Permit.
func (b *orderBench) rejected(pods []*v1.Pod) (out []string) {
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	for _, pod := range pods {
		if _, ok := b.sched.rejected[pod.UID]; ok {
			out = append(out, pod.Name)
		}
	}
	return out
}

func (b *orderBench) later(d time.Duration) { b.now = b.now.Add(d) }

func (b *orderBench) timesActivated(pod *v1.Pod) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.activated[pod.Name]
}

func priority(p int32) *int32 { return &p }

// TestYoungerShareYieldsToAnOlderOneWaitingForRoom checks that when a
// member of a share finds no node, the shares of other sources younger
// than it (seen later at one priority, or of a lower priority) are let go
// as one, with a reason and an Unreserve kind of their own, and older ones
// are not; that a share a member of which the source allowed, a share of
// the same source and a candidate of no share are never let go.
func TestYoungerShareYieldsToAnOlderOneWaitingForRoom(t *testing.T) {
	ctx := context.Background()

	t.Run("the younger share's waiting members are let go, the older's are not", func(t *testing.T) {
		b := newOrderBench(t)
		older, younger := b.gang("a", "g", 4, nil), b.gang("b", "g", 4, nil)
		b.wait(older[0], younger[0])
		b.later(time.Second)
		b.wait(older[1], younger[1], older[2], younger[2])
		if n := b.fail(older[3]); n != 3 {
			t.Fatalf("the older share's member found no node: %d let go, want the younger share's 3", n)
		}
		if got := b.rejected(append(older, younger...)); fmt.Sprint(got) != "[b-g-0 b-g-1 b-g-2]" {
			t.Fatalf("rejected %v, want the younger share's waiting members", got)
		}
		if msg := b.sched.rejected[younger[0].UID]; msg != shareYieldedReason {
			t.Errorf("rejected for %q, want %q", msg, shareYieldedReason)
		}
		kind, _ := b.m.Unreserve(ctx, younger[0], "node-1")
		if kind != UnreservedShareYielded {
			t.Errorf("a yielded member's reservation ended as %q, want %q", kind, UnreservedShareYielded)
		}
	})

	t.Run("a younger share's member that fails lets no older share go", func(t *testing.T) {
		b := newOrderBench(t)
		older, younger := b.gang("a", "g", 4, nil), b.gang("b", "g", 4, nil)
		b.wait(older[0])
		b.later(time.Second)
		b.wait(younger[0], older[1], younger[1], older[2], younger[2])
		if n := b.fail(younger[3]); n != 0 {
			t.Errorf("the younger share's member found no node: %d let go (%v), want none", n, b.rejected(older))
		}
	})

	t.Run("a member between Reserve and Permit is rejected at Permit", func(t *testing.T) {
		b := newOrderBench(t)
		older, younger := b.gang("a", "g", 2, nil), b.gang("b", "g", 2, nil)
		b.admit(older[0])
		b.later(time.Second)
		b.wait(younger[0])
		b.admit(younger[1])
		if _, err := b.m.Reserve(ctx, younger[1], "node-1", nil, 1); err != nil {
			t.Fatal(err)
		}
		b.fail(older[0])
		if d := b.m.Permit(ctx, younger[1]); d.Verdict != Reject || d.Reason != shareYieldedReason {
			t.Errorf("Permit of a member of a yielded share: %v %q, want Reject %q", d.Verdict, d.Reason, shareYieldedReason)
		}
	})

	t.Run("a share with a member allowed is never let go", func(t *testing.T) {
		for _, settled := range []bool{true, false} {
			t.Run(fmt.Sprintf("allowance settled %v", settled), func(t *testing.T) {
				b := newOrderBench(t)
				older, younger := b.gang("a", "g", 2, nil), b.gang("b", "g", 3, nil)
				b.admit(older[0])
				b.later(time.Second)
				b.wait(younger...)
				// The source allows younger[0]: the allowance lands in
				// the cache; settled, Permit has let it go on to bind.
				reserved := b.m.reserved[younger[0].UID]
				allowed := younger[0].DeepCopy()
				allowed.Annotations[protocol.AllowedAnnotation] = protocol.Allowance{SourceUID: "s-" + allowed.Name, Generation: 1, Nonce: reserved.Nonce}.Encode()
				if err := b.pods.Update(allowed); err != nil {
					t.Fatal(err)
				}
				if settled {
					if d := b.m.Permit(ctx, allowed); d.Verdict != Allow {
						t.Fatalf("Permit of an allowed member: %v", d.Verdict)
					}
				}
				if n := b.fail(older[0]); n != 0 {
					t.Errorf("let go %d members (%v) of a share whose member was allowed", n, b.rejected(younger))
				}
			})
		}
	})

	t.Run("shares of one source are not ordered here", func(t *testing.T) {
		b := newOrderBench(t)
		older, younger := b.gang("a", "g1", 2, nil), b.gang("a", "g2", 2, nil)
		b.admit(older[0])
		b.later(time.Second)
		b.wait(younger...)
		if n := b.fail(older[0]); n != 0 {
			t.Errorf("let go %d members of a younger share of the same source", n)
		}
		if reason := b.m.HoldBack(klog.Background(), b.member("a-g2-late", "a", "g2", nil)); reason != "" {
			t.Errorf("a member of the same source's younger share was held back: %s", reason)
		}
	})

	t.Run("a candidate of no share is never affected", func(t *testing.T) {
		b := newOrderBench(t)
		older := b.gang("a", "g", 2, nil)
		b.admit(older[0])
		b.later(time.Second)
		plain := b.member("plain", "b", "", nil)
		b.wait(plain)
		if n := b.fail(older[0]); n != 0 {
			t.Errorf("let go %d: a candidate of no share for a share waiting for room", n)
		}
		if reason := b.m.HoldBack(klog.Background(), b.member("plain-2", "b", "", nil)); reason != "" {
			t.Errorf("a candidate of no share held back: %s", reason)
		}
		// Nor does it make anyone wait or yield when it finds no node.
		b2 := newOrderBench(t)
		plain = b2.member("plain", "b", "", nil)
		b2.admit(plain)
		younger := b2.gang("c", "g", 2, nil)
		b2.later(time.Second)
		b2.wait(younger...)
		if n := b2.fail(plain); n != 0 || len(b2.m.Shares()) != 1 || b2.m.Shares()[0].WaitingForRoom != nil {
			t.Errorf("a candidate of no share that found no node let go %d, shares %+v", n, b2.m.Shares())
		}
	})
}

// TestSharesAreOrderedByPriorityThenBySeen checks the order: at one
// priority the share seen first, by this scheduler, goes first; a higher
// priority goes before an older share.
func TestSharesAreOrderedByPriorityThenBySeen(t *testing.T) {
	for _, tt := range []struct {
		name string
		// first is seen first, second a second later.
		firstPriority, secondPriority *int32
		// olderFirst: first goes before second.
		olderFirst bool
	}{
		{"equal priority: the share seen first", nil, nil, true},
		{"equal explicit priority: the share seen first", priority(5), priority(5), true},
		{"a higher priority goes before an older share", priority(0), priority(10), false},
		{"a lower priority goes after a younger share", priority(-1), nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newOrderBench(t)
			// The share seen first has the later name, so that the order
			// by name alone would be the wrong one.
			first, second := b.gang("b", "g", 2, tt.firstPriority), b.gang("a", "g", 2, tt.secondPriority)
			b.wait(first[0])
			b.later(time.Second)
			b.wait(second[0])
			// Each one's second member finds no node in turn: only the
			// older lets the younger go.
			want := map[bool][]*v1.Pod{true: first, false: second}
			olderShare, youngerShare := want[tt.olderFirst], want[!tt.olderFirst]
			if n := b.fail(youngerShare[1]); n != 0 {
				t.Fatalf("the younger share's member let %d go (%v)", n, b.rejected(olderShare))
			}
			if n := b.fail(olderShare[1]); n != 1 || len(b.rejected(youngerShare)) != 1 {
				t.Fatalf("the older share's member let %d go, want the younger share's one", n)
			}
			if got := b.m.Shares(); len(got) < 1 || got[0].Share != olderShare[0].Labels[protocol.SourceClusterLabel]+"/ns/g" {
				t.Errorf("/debug/state lists %+v, want the older share first", got)
			}
		})
	}
}

// TestYoungerShareWaitsForAnOlderOne checks that a member of a younger
// share of another source is refused at PreFilter while an older share
// waits for room, and activated once it stops waiting: when its failed
// member reserves, when that member is gone, when its share is let go, or a
// Permit timeout after its last failure when it never fits; and that
// nothing about it is remembered for long once its members are gone.
func TestYoungerShareWaitsForAnOlderOne(t *testing.T) {
	ctx := context.Background()
	// setup: the older share a holds three reservations and its fourth
	// member found no node; b's next member is refused.
	setup := func(t *testing.T) (*orderBench, []*v1.Pod, *v1.Pod) {
		b := newOrderBench(t)
		older := b.gang("a", "g", 4, nil)
		b.wait(older[:3]...)
		b.later(time.Second)
		younger := b.member("b-g-0", "b", "g", nil)
		b.fail(older[3])
		if reason := b.m.HoldBack(klog.Background(), younger); reason != ReasonOlderShareWaits {
			t.Fatalf("PreFilter of a younger share's member while an older waits for room: %q, want %q", reason, ReasonOlderShareWaits)
		}
		if got := b.m.Shares(); len(got) != 2 || got[0].WaitingForRoom == nil || got[0].WaitingForRoom.Failed != 1 || got[1].HeldBack != 1 {
			t.Errorf("/debug/state shares %+v, want a waiting for one member, then b holding one back", got)
		}
		b.m.sweepOrder(klog.Background(), b.now)
		if n := b.timesActivated(younger); n != 0 {
			t.Fatalf("a member held back was activated %d times while the older share waits", n)
		}
		return b, older, younger
	}

	t.Run("activated when the older share's failed member reserves", func(t *testing.T) {
		b, older, younger := setup(t)
		b.wait(older[3])
		if n := b.timesActivated(younger); n != 1 {
			t.Fatalf("activated %d times once the older share's last member reserved, want once", n)
		}
		b.admit(younger)
	})

	t.Run("activated a Permit timeout after the last failure when the older never fits", func(t *testing.T) {
		b, older, younger := setup(t)
		b.later(orderPermit / 2)
		b.fail(older[3]) // fails again: the wait goes on from here
		b.later(orderPermit - time.Second)
		b.m.sweepOrder(klog.Background(), b.now)
		if n := b.timesActivated(younger); n != 0 {
			t.Fatalf("activated %d times within a Permit timeout of the last failure", n)
		}
		b.later(time.Second)
		b.m.sweepOrder(klog.Background(), b.now)
		if n := b.timesActivated(younger); n != 1 {
			t.Fatalf("activated %d times a Permit timeout after the last failure, want once", n)
		}
		b.admit(younger)
	})

	t.Run("activated when the older share's failed member is gone", func(t *testing.T) {
		b, older, younger := setup(t)
		if err := b.pods.Delete(older[3]); err != nil {
			t.Fatal(err)
		}
		b.m.sweepOrder(klog.Background(), b.now)
		if n := b.timesActivated(younger); n != 1 {
			t.Fatalf("activated %d times once the failed member was deleted, want once", n)
		}
	})

	t.Run("activated when the older share is let go", func(t *testing.T) {
		b, _, younger := setup(t)
		deadline := b.m.Shares()[0].Deadline
		// The failure came a second after the share's last member joined:
		// its share is let go before the wait's own bound.
		if n := b.m.expireShares(deadline.Add(-time.Second)); n != 0 {
			t.Fatalf("let go %d before the share's deadline", n)
		}
		if n := b.m.expireShares(deadline); n != 3 {
			t.Fatalf("let go %d of the older share at its deadline, want 3", n)
		}
		b.m.sweepOrder(klog.Background(), deadline)
		if n := b.timesActivated(younger); n != 1 {
			t.Fatalf("activated %d times once the older share was let go, want once", n)
		}
	})

	t.Run("a share's place is forgotten once its members are gone", func(t *testing.T) {
		b, older, younger := setup(t)
		b.wait(older[3])
		b.admit(younger)
		for _, pod := range older {
			b.m.Unreserve(ctx, pod, "node-1")
		}
		b.later(forgetShareAfter)
		b.m.sweepOrder(klog.Background(), b.now)
		if got := len(b.m.shares); got != 2 {
			t.Fatalf("%d shares remembered while their members are in the cache, want 2", got)
		}
		for _, pod := range older {
			if err := b.pods.Delete(pod); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.pods.Delete(younger); err != nil {
			t.Fatal(err)
		}
		b.later(forgetShareAfter)
		b.m.sweepOrder(klog.Background(), b.now)
		if got := len(b.m.shares); got != 0 {
			t.Errorf("%d shares remembered with no member left, want none", got)
		}
	})
}
