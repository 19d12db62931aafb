package summary

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// harness drives a publisher's passes with a fake clock, stores standing
// for its informers' caches and an in-memory client that counts writes.
// It tests the publisher's glue (what it reads, compares and writes); the
// sandbox tests run it against a real API server.
type harness struct {
	t       *testing.T
	p       *Publisher
	clock   *clocktesting.FakeClock
	client  client.Client // unintercepted: someone else's writes
	writes  int
	failing error // returned by the next create or update
	deletes int   // delete calls
	// failingDeletes: every delete fails while set.
	failingDeletes error
}

func newHarness(t *testing.T) *harness {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, clock: clocktesting.NewFakeClock(t0)}
	h.client = fake.NewClientBuilder().WithScheme(scheme).Build()
	write := func() error {
		if err := h.failing; err != nil {
			h.failing = nil
			return err
		}
		h.writes++
		return nil
	}
	counted := interceptor.NewClient(h.client.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			h.deletes++
			if h.failingDeletes != nil {
				return h.failingDeletes
			}
			return c.Delete(ctx, obj, opts...)
		},
	})
	h.p = newPublisher(counted, interval, nil, h.clock)
	h.p.nodeStore = cache.NewStore(cache.MetaNamespaceKeyFunc)
	h.p.podStore = cache.NewStore(cache.MetaNamespaceKeyFunc)
	return h
}

// pass runs one pass of the publisher's loop and returns the writes it made.
func (h *harness) pass() int {
	h.t.Helper()
	before := h.writes
	h.p.pass(context.Background())
	return h.writes - before
}

// sleep runs the loop as Start would, a pass at each time it asks to be
// woken, until the clock is d later, and returns the writes made.
func (h *harness) sleep(d time.Duration) int {
	h.t.Helper()
	end := h.clock.Now().Add(d)
	before := h.writes
	for i := 0; ; i++ {
		if i > 10000 {
			h.t.Fatal("the loop keeps asking to be woken at once")
		}
		next := h.p.pass(context.Background())
		if next.After(end) {
			break
		}
		if next.After(h.clock.Now()) {
			h.clock.SetTime(next)
		}
	}
	h.clock.SetTime(end)
	return h.writes - before
}

func (h *harness) addNode(n *corev1.Node) {
	if err := h.p.nodeStore.Add(n); err != nil {
		h.t.Fatal(err)
	}
	h.p.capacityChanged()
}

func (h *harness) addPod(p *corev1.Pod) {
	if err := h.p.podStore.Add(usageOf(p)); err != nil {
		h.t.Fatal(err)
	}
	h.p.capacityChanged()
}

func (h *harness) stored(name string) (*v1alpha1.ClusterSummary, bool) {
	h.t.Helper()
	var s v1alpha1.ClusterSummary
	err := h.client.Get(context.Background(), client.ObjectKey{Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return &s, true
}

func (h *harness) mustStored(name string) *v1alpha1.ClusterSummary {
	h.t.Helper()
	s, ok := h.stored(name)
	if !ok {
		h.t.Fatalf("summary %s not stored", name)
	}
	return s
}

var invitation = Invitation{
	Name:             "team-a/source-1",
	Namespaces:       []string{"team-b", "team-a", "team-b"},
	CreateNamespaces: true,
	Labels:           map[string]string{"multicluster.flotilla.dev/invitation": "source-1"},
}

func TestPublisherCreatesWhatIsMissing(t *testing.T) {
	h := newHarness(t)
	h.addNode(node("n1"))
	h.p.Set("s1", invitation)
	if w := h.pass(); w != 1 {
		t.Fatalf("first pass wrote %d times, want 1 (create)", w)
	}
	s := h.mustStored("s1")
	if s.Labels["multicluster.flotilla.dev/invitation"] != "source-1" {
		t.Errorf("labels %v, want the invitation's", s.Labels)
	}
	st := s.Status
	if st.Invitation != "team-a/source-1" || !st.CreateNamespaces || len(st.Namespaces) != 2 || st.Namespaces[0] != "team-a" || st.Namespaces[1] != "team-b" {
		t.Errorf("invitation part %q %v %v, want team-a/source-1 [team-a team-b] true", st.Invitation, st.Namespaces, st.CreateNamespaces)
	}
	if st.Nodes != 1 || st.UpdateTime == nil || !st.UpdateTime.Time.Equal(t0) {
		t.Errorf("nodes %d, updateTime %v; want 1 and %v", st.Nodes, st.UpdateTime, t0)
	}
	if w := h.pass(); w != 0 {
		t.Errorf("a pass with nothing changed wrote %d times", w)
	}
}

func TestPublisherCoalescesABurst(t *testing.T) {
	h := newHarness(t)
	h.addNode(node("n1", withAllocatable("2000", "4000Gi", "2000")))
	h.p.Set("s1", invitation)
	h.p.Set("s2", invitation)
	if w := h.pass(); w != 2 {
		t.Fatalf("first pass wrote %d times, want 2", w)
	}
	// 1,000 pods bound over 2 s, a second after the summaries were written:
	// the loop wakes for every one, writes nothing before the interval ends,
	// then writes each summary once, with all 1,000 pods in it.
	h.clock.Step(time.Second)
	writes := 0
	for i := range 1000 {
		p := pod("n1", "1", "1Gi")
		p.Name = "p" + strconv.Itoa(i)
		h.addPod(p)
		writes += h.pass()
		h.clock.Step(2 * time.Millisecond)
	}
	if writes != 0 {
		t.Fatalf("the burst wrote %d times within the interval, want none", writes)
	}
	if w := h.sleep(interval); w != 2 {
		t.Fatalf("after the burst: %d writes, want one per summary", w)
	}
	for _, name := range []string{"s1", "s2"} {
		if free := h.mustStored(name).Status.Free[corev1.ResourcePods]; free.Value() != 1000 {
			t.Errorf("%s: free pods %s, want 1000 (every pod of the burst counted)", name, free.String())
		}
	}
	// Nothing changes: passes for a long while write nothing, though they
	// compare every summary with what is stored each interval.
	if w := h.sleep(10 * interval); w != 0 {
		t.Errorf("quiet cluster: %d writes, want none", w)
	}
}

func TestPublisherUnchangedContentIsNotWritten(t *testing.T) {
	h := newHarness(t)
	h.addNode(node("n1"))
	h.p.Set("s1", invitation)
	h.pass()
	// Events that change nothing the summary shows (a pod that requests
	// nothing on a node that does not count, a re-Set of the same
	// invitation) make the publisher look, not write.
	h.clock.Step(2 * interval)
	h.addPod(pod("elsewhere", "1", "1Gi"))
	h.p.Set("s1", invitation)
	if w := h.sleep(3 * interval); w != 0 {
		t.Errorf("unchanged content: %d writes, want none", w)
	}
}

func TestPublisherRepairsWhatOthersChanged(t *testing.T) {
	h := newHarness(t)
	h.addNode(node("n1"))
	h.p.Set("s1", invitation)
	h.pass()
	ctx := context.Background()

	// Someone edits the summary and adds a label of their own.
	s := h.mustStored("s1")
	s.Status.Nodes = 42
	s.Labels["someone"] = "else"
	if err := h.client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if w := h.sleep(interval); w != 1 {
		t.Fatalf("edited summary: %d writes within an interval, want 1", w)
	}
	s = h.mustStored("s1")
	if s.Status.Nodes != 1 || s.Labels["someone"] != "else" {
		t.Errorf("after repair: nodes %d labels %v; want 1 and their label kept", s.Status.Nodes, s.Labels)
	}

	// Someone deletes it.
	if err := h.client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	if w := h.sleep(interval); w != 1 {
		t.Fatalf("deleted summary: %d writes within an interval, want 1", w)
	}
	h.mustStored("s1")
}

func TestPublisherRetriesAFailedWriteAnIntervalLater(t *testing.T) {
	h := newHarness(t)
	h.addNode(node("n1"))
	h.failing = errors.New("the API server is down")
	h.p.Set("s1", invitation)
	if w := h.pass(); w != 0 {
		t.Fatalf("failing write counted: %d", w)
	}
	if w := h.sleep(interval - time.Millisecond); w != 0 {
		t.Fatalf("retried %d times before the interval passed", w)
	}
	if w := h.sleep(time.Millisecond); w != 1 {
		t.Fatalf("%d writes an interval after the failure, want 1", w)
	}
	h.mustStored("s1")
}

func TestPublisherRemoveDeletes(t *testing.T) {
	h := newHarness(t)
	h.addNode(node("n1"))
	h.p.Set("s1", invitation)
	h.p.Set("s2", invitation)
	h.pass()
	h.p.Remove("s1")
	h.pass()
	if _, ok := h.stored("s1"); ok {
		t.Fatal("removed summary still stored")
	}
	h.addNode(node("n2"))
	if w := h.sleep(2 * interval); w != 1 {
		t.Errorf("after a node joined: %d writes, want 1 (s2 only)", w)
	}
	if _, ok := h.stored("s1"); ok {
		t.Error("removed summary written again")
	}
	if h.mustStored("s2").Status.Nodes != 2 {
		t.Error("s2 not updated")
	}
	// Removing what was never written is done at once.
	h.p.Remove("never")
	h.pass()
	if len(h.p.deleting) != 0 {
		t.Errorf("deletions pending: %v", h.p.deleting)
	}
}

func TestPublisherRetriesAFailedDeleteAnIntervalLater(t *testing.T) {
	h := newHarness(t)
	h.addNode(node("n1"))
	h.p.Set("s1", invitation)
	h.pass()
	h.failingDeletes = errors.New("the API server is down")
	h.p.Remove("s1")
	h.pass()
	// Pod events wake the loop again and again: the delete is not retried
	// before the interval has passed.
	for i := range 100 {
		h.clock.Step(10 * time.Millisecond)
		p := pod("n1", "1", "1Gi")
		p.Name = "p" + strconv.Itoa(i)
		h.addPod(p)
		h.pass()
	}
	if h.deletes != 1 {
		t.Fatalf("%d delete calls within the interval, want 1", h.deletes)
	}
	h.failingDeletes = nil
	h.sleep(interval)
	if h.deletes != 2 {
		t.Errorf("%d delete calls, want the retry an interval after the failure", h.deletes)
	}
	if _, ok := h.stored("s1"); ok {
		t.Error("removed summary still stored")
	}
	if len(h.p.deleting) != 0 {
		t.Errorf("deletions pending: %v", h.p.deleting)
	}
}

// TestPublisherWaitsForWork checks that the publisher watches nothing
// before it has a summary to keep or delete (a cluster that invites no
// source would watch every bound pod for nothing), and starts once it has.
func TestPublisherWaitsForWork(t *testing.T) {
	h := newHarness(t)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if h.p.waitForWork(ended) {
		t.Fatal("work to do without an invitation")
	}
	done := make(chan bool)
	go func() { done <- h.p.waitForWork(context.Background()) }()
	h.p.Set("s1", invitation)
	if !<-done {
		t.Fatal("no work after an invitation")
	}
	h.p.Remove("s1")
	if !h.p.waitForWork(ended) {
		t.Error("no work with a summary to delete")
	}
}
