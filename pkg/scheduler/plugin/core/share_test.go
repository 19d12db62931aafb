package core

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// waitingPods is a scheduler whose pods in Permit are those registered; it
// records which were rejected.
type waitingPods struct {
	mu       sync.Mutex
	waiting  map[types.UID]*fakeWaiting
	rejected map[types.UID]string
}

func (w *waitingPods) GetWaitingPod(uid types.UID) fwk.WaitingPod {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.waiting[uid]; ok {
		return p
	}
	return nil
}

func (w *waitingPods) wait(pod *v1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting[pod.UID] = &fakeWaiting{pod: pod, owner: w}
}

type fakeWaiting struct {
	pod   *v1.Pod
	owner *waitingPods
}

func (f *fakeWaiting) GetPod() *v1.Pod             { return f.pod }
func (f *fakeWaiting) GetPendingPlugins() []string { return []string{"p"} }
func (f *fakeWaiting) Allow(string)                {}
func (f *fakeWaiting) Reject(_ string, msg string) bool {
	f.owner.rejected[f.pod.UID] = msg
	delete(f.owner.waiting, f.pod.UID)
	return true
}
func (f *fakeWaiting) Preempt(plugin, msg string) bool { return f.Reject(plugin, msg) }

func shareMember(name, share string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "src", protocol.SourceUIDLabel: "s-" + name}}}
	if share != "" {
		pod.Annotations = map[string]string{protocol.ShareAnnotation: share}
	}
	return pod
}

// TestShareHeldTogether checks that the members of a gang's share wait
// while members keep joining, past the Permit timeout of the first, and
// are let go together once none joined for a Permit timeout, or once the
// share bound from the first passed; a candidate of no share (or of a
// malformed one) times out on its own, a member the source decides
// leaves the share, and the reservations let go report why.
func TestShareHeldTogether(t *testing.T) {
	ctx := context.Background()
	const permit, bound = 30 * time.Second, 100 * time.Second
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	setup := func() (*Manager, *waitingPods, *time.Time) {
		now := start
		sched := &waitingPods{waiting: map[types.UID]*fakeWaiting{}, rejected: map[types.UID]string{}}
		m := NewManager(Options{PluginName: "p", SchedulerName: "s", PermitTimeout: permit, ShareTimeout: bound, Now: func() time.Time { return now }},
			sched, nil, NewStateWriter("test", newRecordingPatcher(nil), nil))
		return m, sched, &now
	}
	// join reserves pod and makes it wait in Permit.
	join := func(t *testing.T, m *Manager, sched *waitingPods, pod *v1.Pod) Decision {
		t.Helper()
		if _, err := m.Reserve(ctx, pod, "node-1", nil, 1); err != nil {
			t.Fatal(err)
		}
		d := m.Permit(ctx, pod)
		if d.Verdict != Wait {
			t.Fatalf("Permit of %s: %v, want Wait", pod.Name, d.Verdict)
		}
		sched.wait(pod)
		return d
	}
	// deny has the source deny pod: Permit, asked again, rejects it, and
	// it leaves its share.
	deny := func(t *testing.T, m *Manager, pod *v1.Pod) {
		t.Helper()
		pod.Annotations[protocol.DeniedAnnotation] = "s-" + pod.Name + "/1"
		if d := m.Permit(ctx, pod); d.Verdict != Reject {
			t.Fatalf("denied member %s: %v, want Reject", pod.Name, d.Verdict)
		}
	}

	t.Run("a share gathering is held past the Permit timeout of its first member", func(t *testing.T) {
		m, sched, now := setup()
		a, b, c := shareMember("a", "g1"), shareMember("b", "g1"), shareMember("c", "g1")
		if d := join(t, m, sched, a); d.Timeout <= bound {
			t.Errorf("a share member waits %s in Permit: the scheduler would time it out before its share", d.Timeout)
		}
		*now = start.Add(20 * time.Second)
		join(t, m, sched, b)
		*now = start.Add(45 * time.Second) // a's own Permit timeout has passed
		join(t, m, sched, c)
		if n := m.expireShares(*now); n != 0 {
			t.Fatalf("%d members let go while the share still gathers", n)
		}
		// None joined for a Permit timeout: all let go at once.
		*now = start.Add(45*time.Second + permit)
		if n := m.expireShares(*now); n != 3 {
			t.Fatalf("let go %d members at the share's deadline, want 3 together (rejected: %v)", n, sched.rejected)
		}
		if got := m.Shares(); len(got) != 0 {
			t.Errorf("shares after the deadline: %+v, want none", got)
		}
		kind, _ := m.Unreserve(ctx, a, "node-1")
		if kind != UnreservedShareExpired {
			t.Errorf("a's reservation ended as %q, want %q", kind, UnreservedShareExpired)
		}
	})

	t.Run("a share that keeps gathering is let go at its bound", func(t *testing.T) {
		m, sched, now := setup()
		for i := range 7 {
			*now = start.Add(time.Duration(i) * 15 * time.Second)
			if n := m.expireShares(*now); n != 0 {
				t.Fatalf("at %s: %d let go while members keep joining within the bound", now.Sub(start), n)
			}
			join(t, m, sched, shareMember(fmt.Sprintf("m%d", i), "g1"))
		}
		*now = start.Add(bound)
		if n := m.expireShares(*now); n != 7 {
			t.Fatalf("let go %d at the share's bound, want all 7 together", n)
		}
		// A member that reserves again starts a new share.
		again := shareMember("m0", "g1")
		m.Unreserve(ctx, again, "node-1")
		join(t, m, sched, again)
		if got := m.Shares(); len(got) != 1 || got[0].Members != 1 || !got[0].First.Equal(*now) {
			t.Errorf("shares after a member reserved again: %+v, want one new share of one member", got)
		}
	})

	t.Run("candidates of no share wait on their own", func(t *testing.T) {
		m, sched, now := setup()
		plain, bad := shareMember("plain", ""), shareMember("bad", "Not/A-Share")
		for _, pod := range []*v1.Pod{plain, bad} {
			if d := join(t, m, sched, pod); d.Timeout != permit {
				t.Errorf("%s waits %s in Permit, want the Permit timeout %s", pod.Name, d.Timeout, permit)
			}
		}
		*now = start.Add(time.Hour)
		if n := m.expireShares(*now); n != 0 || len(m.Shares()) != 0 {
			t.Errorf("a candidate of no share was let go by a share (%d; shares %+v)", n, m.Shares())
		}
	})

	t.Run("shares of other sources, namespaces or gangs are apart", func(t *testing.T) {
		m, sched, now := setup()
		other := shareMember("o", "g1")
		other.Labels[protocol.SourceClusterLabel] = "other"
		join(t, m, sched, shareMember("a", "g1"))
		join(t, m, sched, shareMember("b", "g2"))
		*now = start.Add(20 * time.Second)
		join(t, m, sched, other)
		if got := len(m.Shares()); got != 3 {
			t.Fatalf("%d shares, want 3: %+v", got, m.Shares())
		}
		*now = start.Add(permit)
		if n := m.expireShares(*now); n != 2 {
			t.Errorf("let go %d, want a and b, not another source's share joined since", n)
		}
	})

	t.Run("a member the source decides leaves the share", func(t *testing.T) {
		m, sched, now := setup()
		a, b := shareMember("a", "g1"), shareMember("b", "g1")
		join(t, m, sched, a)
		join(t, m, sched, b)
		// The source denies a before the deadline.
		deny(t, m, a)
		if got := m.Shares(); len(got) != 1 || got[0].Members != 1 {
			t.Fatalf("shares once a was denied: %+v, want one of one member", got)
		}
		*now = start.Add(permit)
		if n := m.expireShares(*now); n != 1 {
			t.Errorf("let go %d at the deadline, want b alone", n)
		}
	})

	t.Run("a member that leaves and reserves again does not put the deadline off", func(t *testing.T) {
		m, sched, now := setup()
		a, b := shareMember("a", "g1"), shareMember("b", "g1")
		join(t, m, sched, a)
		join(t, m, sched, b)
		// b is denied, then its denial lifted, and it reserves again
		// 20 s on: the share is no closer to complete than it was.
		deny(t, m, b)
		m.Unreserve(ctx, b, "node-1")
		delete(b.Annotations, protocol.DeniedAnnotation)
		*now = start.Add(20 * time.Second)
		join(t, m, sched, b)
		*now = start.Add(permit)
		if n := m.expireShares(*now); n != 2 {
			t.Errorf("let go %d a Permit timeout after the last new member, want both a and b (rejected: %v)", n, sched.rejected)
		}
	})

	t.Run("a member in Reserve when its share expires is rejected at Permit", func(t *testing.T) {
		m, sched, now := setup()
		join(t, m, sched, shareMember("a", "g1"))
		late := shareMember("late", "g1")
		*now = start.Add(10 * time.Second)
		if _, err := m.Reserve(ctx, late, "node-1", nil, 1); err != nil {
			t.Fatal(err)
		}
		*now = start.Add(10*time.Second + permit)
		m.expireShares(*now)
		if d := m.Permit(ctx, late); d.Verdict != Reject {
			t.Errorf("a member of a let-go share reached Permit: %v, want Reject", d.Verdict)
		}
	})
}
