package reservation_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// electedIn elects the pod's candidate in t1 (t2 reserves too, with a
// lower score) and returns the election.
func electedIn(h *harness, podName string) (*corev1.Pod, protocol.Election) {
	h.t.Helper()
	pod := h.newSourcePod(podName)
	h.reconcile(pod)
	h.reserve(pod, "t1", onNode{name: "n1", score: 90})
	h.reserve(pod, "t2", onNode{name: "n2", score: 10})
	h.reconcile(pod)
	e := h.election(pod)
	if e.Target != "t1" {
		h.t.Fatalf("election %s, want t1 (the better score)", e.Encode())
	}
	return pod, e
}

// TestStalledElectionIsRevokedAfterTheTimeout: an elected candidate that
// its target neither binds nor gives up is deleted once ElectionTimeout
// has passed on the controller's clock, not before, and the pod is then
// elected elsewhere; until then the controller asks to look again when
// the timeout is due.
func TestStalledElectionIsRevokedAfterTheTimeout(t *testing.T) {
	h := newHarness(t, twoTargets())
	// The targets' objects exist: the election is released by what the
	// target's API server says of the candidate, not by the target going.
	for _, name := range []string{"t1", "t2"} {
		if err := h.c.Client.Create(h.ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h.c.Clock, h.c.ElectionTimeout = clock, time.Minute
	pod, _ := electedIn(h, "web-0")

	res := h.reconcile(pod)
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("waiting on the election: look again after %v, want within the minute of the timeout", res.RequeueAfter)
	}
	clock.Step(59 * time.Second)
	h.reconcile(pod)
	if h.candidate(pod, "t1") == nil {
		t.Fatal("the elected candidate was revoked before the election timeout")
	}

	clock.Step(2 * time.Second)
	h.reconcile(pod)
	if c := h.candidate(pod, "t1"); c != nil && c.DeletionTimestamp == nil {
		t.Fatal("the elected candidate, unbound past the election timeout, was not revoked")
	}
	h.reconcile(pod)
	h.reconcile(pod)
	if e := h.election(pod); e.Target != "t2" || e.Generation < 2 {
		t.Errorf("election %s after t1's candidate was revoked, want a later one of t2", e.Encode())
	}
}

// TestOtherCandidatesDeniedAfterDenyAfter: the candidates that cannot be
// elected while another stands elected are denied (so they hold no node)
// only once the election has stood DenyAfter on the controller's clock.
func TestOtherCandidatesDeniedAfterDenyAfter(t *testing.T) {
	h := newHarness(t, twoTargets())
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h.c.Clock, h.c.DenyAfter = clock, 10*time.Second
	pod, e := electedIn(h, "web-0")

	res := h.reconcile(pod)
	if got := h.candidate(pod, "t2").Annotations[protocol.DeniedAnnotation]; got != "" {
		t.Fatalf("t2's candidate denied (%q) before the election stood DenyAfter", got)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > 10*time.Second {
		t.Errorf("look again after %v, want within DenyAfter", res.RequeueAfter)
	}

	clock.Step(11 * time.Second)
	h.reconcile(pod)
	want := protocol.Denial{SourceUID: string(pod.UID), Generation: e.Generation}.Encode()
	if got := h.candidate(pod, "t2").Annotations[protocol.DeniedAnnotation]; got != want {
		t.Errorf("t2's candidate denial %q after DenyAfter, want %q", got, want)
	}
	if got := h.candidate(pod, "t1").Annotations[protocol.DeniedAnnotation]; got != "" {
		t.Errorf("the elected candidate was denied: %q", got)
	}
}

// TestElectionInADrainedTargetMoves: a pod elected in a target that is
// then deleted, and not bound there, is elected elsewhere as soon as the
// drain has deleted its candidate, though the target's object stays for
// as long as other pods still run there.
func TestElectionInADrainedTargetMoves(t *testing.T) {
	h := newHarness(t, twoTargets())
	ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "t1", Finalizers: []string{target.Finalizer}}}
	if err := h.c.Client.Create(h.ctx, ct); err != nil {
		t.Fatal(err)
	}
	pod, _ := electedIn(h, "web-0")

	// The drain: t1 leaves the set and its waiting candidates go; the
	// object stays, held by its finalizer while pods run there.
	t1 := h.targets["t1"]
	h.c.Targets.Remove(t1.Target)
	if err := t1.api.CoreV1().Pods(t1.NamespaceFor(pod.Namespace)).Delete(h.ctx, h.candidate(pod, "t1").Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.reconcile(pod)
	if e := h.election(pod); e.Target != "t1" {
		t.Fatalf("election %s moved before the drain was done", e.Encode())
	}

	h.c.Targets.MarkDrained("t1")
	h.reconcile(pod)
	h.reconcile(pod)
	if e := h.election(pod); e.Target != "t2" || e.Generation < 2 {
		t.Errorf("election %s once t1 was drained, want a later one of t2", e.Encode())
	}
}

// TestSpreadCountsPodsInADrainingTarget: a target being deleted takes no
// new pod, but the pods still running on its virtual node count where they
// run: a sibling there in zone a keeps the new pod out of zone a.
func TestSpreadCountsPodsInADrainingTarget(t *testing.T) {
	h := newHarness(t, []target.Config{
		{Name: "ta", Labels: map[string]string{zoneKey: "a"}},
		{Name: "tb", Labels: map[string]string{zoneKey: "b"}},
		{Name: "tc", Labels: map[string]string{zoneKey: "a"}},
	}, zoneSpread())
	h.placedSibling("web-placed", "ta", "a", true)
	h.c.Targets.Drain(h.targets["ta"].Target)
	pod := h.newSourcePod("web-new", ofWorkload)
	h.reconcile(pod)
	if h.candidate(pod, "tc") != nil || h.candidate(pod, "tb") == nil {
		t.Fatalf("candidates in tc (zone a) %v, in tb (zone b) %v: want only tb's, zone a holding the sibling that runs in the draining target",
			h.candidate(pod, "tc") != nil, h.candidate(pod, "tb") != nil)
	}
	h.reserve(pod, "tb", onNode{name: "b1", zone: "b", score: 10})
	h.reconcile(pod)
	if e := h.election(pod); e.Target != "tb" {
		t.Fatalf("election %s, want tb", e.Encode())
	}
}

// TestPinMovesOffAFullDomain: a target spanning zones a and b gets the
// pod's candidate pinned to zone a; its scheduler finds no node there. The
// candidate is sent again, pinned to zone b, which the spread allows too,
// as kube-scheduler tries the nodes of every domain it allows.
func TestPinMovesOffAFullDomain(t *testing.T) {
	h := newHarness(t, []target.Config{{Name: "home", Self: true}}, zoneSpread())
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h.c.Clock = clock
	h.c.SelfTopology = func([]string) (map[string][]string, []placement.Combination, bool) {
		return map[string][]string{zoneKey: {"a", "b"}}, nil, true
	}
	pod := h.newSourcePod("web-new", ofWorkload)
	h.reconcile(pod)
	if got := candidate.PinnedDomain(h.candidate(pod, "home")); len(got) != 1 || got[0] != "a" {
		t.Fatalf("first candidate pinned to %v, want zone a (the first of a tie)", got)
	}
	h.unschedulable(pod, "home", "0/2 nodes are available: 2 Insufficient memory.")
	h.reconcile(pod) // sees the candidate find no node in zone a
	h.reconcile(pod) // plans zone b: the candidate in zone a is stale
	if c := h.candidate(pod, "home"); c == nil {
		t.Fatal("the stale candidate was deleted at once, not after a wait")
	}
	clock.Step(repinAfterForTest)
	h.reconcile(pod)
	if c := h.candidate(pod, "home"); c != nil && c.DeletionTimestamp == nil {
		t.Fatalf("the candidate pinned to the full zone a is still there: %v", candidate.PinnedDomain(c))
	}
	res := h.reconcile(pod)
	c := h.candidate(pod, "home")
	if c == nil {
		t.Fatalf("no candidate sent again (look again after %v)", res.RequeueAfter)
	}
	if got := candidate.PinnedDomain(c); len(got) != 1 || got[0] != "b" {
		t.Fatalf("candidate sent again pinned to %v, want zone b", got)
	}
}

// repinAfterForTest is past the controller's wait before it sends a
// candidate pinned to a closed domain again.
const repinAfterForTest = 4 * time.Second

// TestGangDeniesAtOnce: a member of an anyClusters gang that is not
// complete keeps one reservation and its candidate elsewhere is denied at
// once, not after DenyAfter: the node it holds there is one another
// member could reserve. Once that reservation is let go, the denial stays
// (the member still keeps its one place), so the target does not reserve
// for it again.
func TestGangDeniesAtOnce(t *testing.T) {
	h, _ := denyingHarness(t)
	pod := h.newSourcePod("worker-0", anyClustersGangOf("train", "2"))
	h.reconcile(pod)
	h.reserve(pod, "t1", onNode{name: "n1", score: 10})
	h.reserve(pod, "t2", onNode{name: "n2", score: 90})
	h.reconcile(pod)
	if e := h.election(pod); e.Elected() {
		t.Fatalf("a member of an incomplete gang was elected: %s", e.Encode())
	}
	want := protocol.Denial{SourceUID: string(pod.UID)}.Encode()
	if got := h.candidate(pod, "t2").Annotations[protocol.DeniedAnnotation]; got != want {
		t.Fatalf("t2's candidate denial %q at once, want %q", got, want)
	}
	if got := h.candidate(pod, "t1").Annotations[protocol.DeniedAnnotation]; got != "" {
		t.Fatalf("the kept reservation in t1 was denied: %q", got)
	}
	h.unreserve(pod, "t2", "denied")
	h.reconcile(pod)
	if got := h.candidate(pod, "t2").Annotations[protocol.DeniedAnnotation]; got != want {
		t.Errorf("t2's denial %q once its reservation was let go, want it kept (%q)", got, want)
	}
}

// TestGangSizedByItsJob: a pod whose gang is its Job (the gang annotation)
// and that gives no size waits for the Job's parallelism. A pod whose Job
// does not exist waits for it a minute from its creation (the pods of a
// manifest may come before the object that sizes them), then is placed
// as an ordinary pod.
func TestGangSizedByItsJob(t *testing.T) {
	h := newHarness(t, twoTargets())
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h.c.Clock = clock
	ofJob := func(job string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Annotations[protocol.GangAnnotation] = protocol.GangOfJob
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job, UID: "job-uid", Controller: ptr.To(true)}}
			p.CreationTimestamp = metav1.NewTime(clock.Now())
		}
	}
	if err := h.c.Client.Create(h.ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "train"}, Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2)}}); err != nil {
		t.Fatal(err)
	}
	member := h.newSourcePod("train-0", ofJob("train"))
	orphan := h.newSourcePod("lost-0", ofJob("lost"))
	for _, pod := range []*corev1.Pod{member, orphan} {
		h.reconcile(pod)
		h.reserve(pod, "t1", onNode{name: "n1", score: 90})
	}
	h.reconcile(member)
	if e := h.election(member); e.Elected() {
		t.Errorf("the member of a Job of parallelism 2, alone, was elected: %s", e.Encode())
	}
	if res := h.reconcile(orphan); res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("the pod waiting for its Job looks again after %v, want within the minute", res.RequeueAfter)
	}
	if e := h.election(orphan); e.Elected() {
		t.Errorf("the pod whose Job does not exist yet was elected at once: %s", e.Encode())
	}
	clock.Step(61 * time.Second)
	h.reconcile(orphan)
	if e := h.election(orphan); !e.Elected() {
		t.Errorf("the pod whose Job did not appear in a minute was not placed as an ordinary pod")
	}
}

// TestGangAllowsWithTheLastElection: in a gang of two that holds its
// places, the first member elected is not allowed; the second is elected
// and allowed in one round (the first's election is written), and the
// first is allowed in its next round, the second's election counted from
// what this process wrote even before its cache shows it.
func TestGangAllowsWithTheLastElection(t *testing.T) {
	h := newHarness(t, twoTargets())
	a, b := pairReservedInT1(h)
	h.reconcile(a)
	if e := h.election(a); e.Target != "t1" {
		t.Fatalf("a: election %s, want t1 (its gang holds both places)", e.Encode())
	}
	if got := h.allowance(a, "t1"); got != "" {
		t.Fatalf("a allowed (%q) with its gang one short of elected", got)
	}
	h.reconcile(b)
	if e := h.election(b); e.Target != "t1" {
		t.Fatalf("b: election %s, want t1", e.Encode())
	}
	if got := h.allowance(b, "t1"); got == "" {
		t.Fatal("b, whose election completed its gang, was not allowed in the same round")
	}
	h.reconcile(a)
	if got := h.allowance(a, "t1"); got == "" {
		t.Fatal("a was not allowed once its gang stood elected")
	}
}

// TestGangWaitReportedAfterAWhile: a member waiting for its gang says so
// in its PodScheduled condition only once its gang has had no new member
// for gangReportAfter (5 s), and looks again by then.
func TestGangWaitReportedAfterAWhile(t *testing.T) {
	h := newHarness(t, twoTargets())
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h.c.Clock = clock
	pod := h.newSourcePod("a", func(p *corev1.Pod) {
		p.Labels[protocol.PodGroupLabel] = "pair"
		p.Annotations[protocol.GangMinMemberAnnotation] = "3"
		p.CreationTimestamp = metav1.NewTime(clock.Now())
	})
	h.reconcile(pod)
	h.reserve(pod, "t1", onNode{name: "n1", score: 50})
	waiting := func() bool {
		for _, c := range h.sourcePod(pod).Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == "WaitingForGang" {
				return true
			}
		}
		return false
	}
	res := h.reconcile(pod)
	if waiting() {
		t.Fatal("a member reported waiting for its gang at once")
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > 5*time.Second {
		t.Errorf("looks again after %v, want within 5 s", res.RequeueAfter)
	}
	// A gang still being made says nothing: a member made 4 s later
	// postpones the report to 5 s after it.
	clock.Step(4 * time.Second)
	h.newSourcePod("b", func(p *corev1.Pod) {
		p.Labels[protocol.PodGroupLabel] = "pair"
		p.Annotations[protocol.GangMinMemberAnnotation] = "3"
		p.CreationTimestamp = metav1.NewTime(clock.Now())
	})
	clock.Step(2 * time.Second)
	res = h.reconcile(pod)
	if waiting() {
		t.Fatal("a member reported waiting 2 s after its gang's newest member was made")
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > 3*time.Second {
		t.Errorf("looks again after %v, want within 3 s", res.RequeueAfter)
	}
	clock.Step(4 * time.Second)
	h.reconcile(pod)
	if !waiting() {
		t.Error("a member whose gang had no new member for 6 s does not say it waits")
	}
}

// TestGangWaitNotReportedWhileItComesCloser: a gang whose members keep
// adding places says nothing of its wait until it has held no more places
// than ever for gangReportAfter (5 s): at ten targets of a small control
// plane a gang of 64 took longer than that to gather its reservations,
// and each member's report cost the source a status write and an Event.
// Places that come and go without adding up to more do not count.
func TestGangWaitNotReportedWhileItComesCloser(t *testing.T) {
	h := newHarness(t, twoTargets())
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h.c.Clock = clock
	trio := func(p *corev1.Pod) {
		p.Labels[protocol.PodGroupLabel] = "trio"
		p.Annotations[protocol.GangMinMemberAnnotation] = "3"
		p.CreationTimestamp = metav1.NewTime(clock.Now())
	}
	a, b := h.newSourcePod("a", trio), h.newSourcePod("b", trio)
	waiting := func() bool {
		for _, c := range h.sourcePod(a).Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == "WaitingForGang" {
				return true
			}
		}
		return false
	}
	h.reconcile(a)
	h.reconcile(b)
	h.reserve(a, "t1", onNode{name: "n1", score: 50})
	h.reconcile(a)
	// 4 s on, b reserves: the gang holds two places, more than ever.
	clock.Step(4 * time.Second)
	h.reserve(b, "t1", onNode{name: "n2", score: 50})
	h.reconcile(b)
	clock.Step(2 * time.Second)
	res := h.reconcile(a)
	if waiting() {
		t.Fatal("a member reported waiting 2 s after its gang last held more places")
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > 3*time.Second {
		t.Errorf("looks again after %v, want within 3 s", res.RequeueAfter)
	}
	// b's place goes and comes back: two places again, no more than
	// before, 5 s after the gang first held two.
	h.unreserve(b, "t1", "Permit timed out")
	h.reconcile(b)
	clock.Step(3 * time.Second)
	h.reserve(b, "t1", onNode{name: "n2", score: 50})
	h.reconcile(b)
	h.reconcile(a)
	if !waiting() {
		t.Error("a member whose gang held no more places than before for 5 s does not say it waits")
	}
}

// TestGangWokenWhenFoundElectedWhole: a member's round that finds its gang
// elected whole and allows it without an election of its own (its
// election was written beside another's that it missed) sends the gang's
// other members to the queue at once, rather than leaving them to look
// again after gangElectedRecheck.
func TestGangWokenWhenFoundElectedWhole(t *testing.T) {
	h := newHarness(t, twoTargets())
	a, b := pairReservedInT1(h)
	h.reconcile(a)
	if got := h.allowance(a, "t1"); h.election(a).Target != "t1" || got != "" {
		t.Fatalf("a: election %s, allowance %q; want elected in t1, not allowed", h.election(a).Encode(), got)
	}
	// b's election, written by a round that had not seen a's.
	live := h.sourcePod(b)
	live.Annotations[protocol.ElectionAnnotation] = protocol.Election{Generation: 1, Target: "t1", Nonce: h.state(b, "t1").Nonce}.Encode()
	if _, err := h.source.CoreV1().Pods(namespace).UpdateStatus(h.ctx, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	changes := make(chan event.TypedGenericEvent[*corev1.Pod], 8)
	h.c.SendChanges(changes)
	h.reconcile(a)
	if got := h.allowance(a, "t1"); got == "" {
		t.Fatal("a was not allowed with its gang elected whole")
	}
	expectWoken(t, changes, "b", "a's round found its gang elected whole and allowed it, but did not wake b")
}

// TestGangKeepsTheTargetAnEarlierRoundChose: a oneCluster member's round
// chooses t2 for its gang (t2 holds both members' places, t1 one) and
// elects there, but its election is not written yet (here: refused); the
// other member's t1 reservation is reported meanwhile, so t1 and t2 each
// hold the whole gang, a tie Decide breaks by order, for t1. The other
// member's round, not seeing the first's election, must still elect in
// t2: elected in two targets, neither complete, the gang would wait until
// their reservations timed out.
func TestGangKeepsTheTargetAnEarlierRoundChose(t *testing.T) {
	h := newHarness(t, twoTargets())
	a, b := pair(h)
	h.reconcile(a)
	h.reconcile(b)
	h.reserve(a, "t1", onNode{name: "n1", score: 50})
	h.reserve(a, "t2", onNode{name: "n1", score: 50})
	h.reserve(b, "t2", onNode{name: "n1", score: 50})
	var refuse atomic.Bool
	refuse.Store(true)
	h.source.PrependReactor("update", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		pod, ok := action.(k8stesting.UpdateAction).GetObject().(*corev1.Pod)
		if refuse.Load() && ok && pod.Annotations[protocol.ElectionAnnotation] != "" {
			return true, nil, errors.New("the election's write is still on its way")
		}
		return false, nil, nil
	})
	if _, err := h.tryReconcile(a); err == nil {
		t.Fatal("a's election was written through a refusing API server")
	}
	refuse.Store(false)
	h.reserve(b, "t1", onNode{name: "n1", score: 50})
	h.reconcile(b)
	if e := h.election(b); e.Target != "t2" {
		t.Fatalf("b elected %q, want t2, where a's round chose to elect a", e.Target)
	}
}

// pair makes a gang of two source pods, a and b (pod group pair).
func pair(h *harness) (a, b *corev1.Pod) {
	h.t.Helper()
	return h.newSourcePod("a", inPair), h.newSourcePod("b", inPair)
}

// inPair makes a source pod a member of pod group pair, of size 2.
func inPair(p *corev1.Pod) {
	p.Labels[protocol.PodGroupLabel] = "pair"
	p.Annotations[protocol.GangMinMemberAnnotation] = "2"
}

// pairReservedInT1 is pair with each member's candidate reserved in t1.
func pairReservedInT1(h *harness) (a, b *corev1.Pod) {
	h.t.Helper()
	a, b = pair(h)
	for _, pod := range []*corev1.Pod{a, b} {
		h.reconcile(pod)
		h.reserve(pod, "t1", onNode{name: "n1", score: 50})
	}
	return a, b
}

// TestGangGivingUpItsTurnLetsGoAtOnce: a gang that stood first a minute
// without completing gives up its turn; its members are sent to the queue
// at once (not left to their next look, up to ten seconds away), and each
// denies its candidates at once, not after DenyAfter: the gang that goes
// next may need their nodes. (A gang of three with one member made holds
// one place for ever.)
func TestGangGivingUpItsTurnLetsGoAtOnce(t *testing.T) {
	h, clock := denyingHarness(t)
	pod := h.newSourcePod("a", anyClustersGangOf("trio", "3"), func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(clock.Now()) })
	h.reconcile(pod)
	h.reserve(pod, "t1", onNode{name: "n1", score: 50})
	h.reconcile(pod)
	if got := h.candidate(pod, "t1").Annotations[protocol.DeniedAnnotation]; got != "" {
		t.Fatalf("the member's reservation was denied during its gang's turn: %q", got)
	}
	changes := make(chan event.TypedGenericEvent[*corev1.Pod], 8)
	h.c.SendChanges(changes)
	clock.Step(61 * time.Second)
	h.reconcile(pod)
	want := protocol.Denial{SourceUID: string(pod.UID)}.Encode()
	if got := h.candidate(pod, "t1").Annotations[protocol.DeniedAnnotation]; got != want {
		t.Errorf("t1's candidate denial %q in the round its gang gave up its turn, want %q at once", got, want)
	}
	expectWoken(t, changes, "a", "the gang gave up its turn, but its members were not sent to the queue")
}

// denyingHarness is a harness of two targets on a fake clock, whose
// denials wait DenyAfter (10 s) but a gang's written at once.
func denyingHarness(t *testing.T) (*harness, *clocktesting.FakeClock) {
	h := newHarness(t, twoTargets())
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h.c.Clock, h.c.DenyAfter = clock, 10*time.Second
	return h, clock
}

// anyClustersGangOf makes a source pod a member of pod group name, of size
// min, under anyClusters.
func anyClustersGangOf(name, min string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		gangOf(name, min)(p)
		p.Annotations[protocol.GangModeAnnotation] = protocol.GangAnyClusters
	}
}

// expectWoken waits up to 5 s for the controller to send pod name to the
// queue (SendChanges), failing with why when it does not, or sends another.
func expectWoken(t *testing.T, changes <-chan event.TypedGenericEvent[*corev1.Pod], name, why string) {
	t.Helper()
	select {
	case e := <-changes:
		if e.Object.GetName() != name {
			t.Fatalf("woke %s, want %s", e.Object.GetName(), name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
}

// TestOneMemberPollsItsGangWhileItsElectionsAreWritten: while a gang's
// elections are written side by side, one elected member looks again
// within gangElectedRecheck, not each of them: every member polling at
// once cost a gang of n members n rounds of n observations each every
// 100 ms. The others look again
// after gangRecheck; once the poller's turn has passed, the next member
// to wait polls.
func TestOneMemberPollsItsGangWhileItsElectionsAreWritten(t *testing.T) {
	h, clock := denyingHarness(t)
	var trio []*corev1.Pod
	for _, name := range []string{"a", "b", "c"} {
		pod := h.newSourcePod(name, gangOf("trio", "3"))
		h.reconcile(pod)
		h.reserve(pod, "t1", onNode{name: "n1", score: 50})
		trio = append(trio, pod)
	}
	a, b, c := trio[0], trio[1], trio[2]
	if res := h.reconcile(a); h.election(a).Target != "t1" || res.RequeueAfter != reservation.GangElectedRecheck {
		t.Fatalf("a: election %s, looks again after %v; want elected in t1, again after %v", h.election(a).Encode(), res.RequeueAfter, reservation.GangElectedRecheck)
	}
	if res := h.reconcile(b); h.election(b).Target != "t1" || res.RequeueAfter != reservation.GangRecheck {
		t.Fatalf("b: election %s, looks again after %v; want elected in t1, again after %v (a polls)", h.election(b).Encode(), res.RequeueAfter, reservation.GangRecheck)
	}
	clock.Step(reservation.GangElectedRecheck + time.Millisecond)
	if res := h.reconcile(b); res.RequeueAfter != reservation.GangElectedRecheck {
		t.Fatalf("b looks again after %v once a's poll passed; want %v", res.RequeueAfter, reservation.GangElectedRecheck)
	}
	h.reconcile(c)
	for _, pod := range trio {
		h.reconcile(pod)
		if got := h.allowance(pod, "t1"); got == "" {
			t.Errorf("%s not allowed once its gang stood elected whole", pod.Name)
		}
	}
}

// TestAnAllowedMemberLooksNoMoreAtItsGang: once a member's candidate
// carries its election's allowance, nothing its gang does changes what its
// round may do, so its rounds (the echo of the allowance, its candidate's
// binding) read none of the other members (in a gang of 64, each of a
// member's rounds read 63 others twice), and the one that finds its
// candidate bound binds it. A member whose target reserved it anew is not
// allowed on that reservation: its gang is looked at again.
func TestAnAllowedMemberLooksNoMoreAtItsGang(t *testing.T) {
	h := newHarness(t, twoTargets())
	a, b := pairReservedInT1(h)
	h.reconcile(a)
	h.reconcile(b)
	h.reconcile(a)
	for _, m := range []*corev1.Pod{a, b} {
		if h.allowance(m, "t1") == "" {
			t.Fatalf("%s not allowed with its gang elected whole", m.Name)
		}
	}
	reads := reservation.CountMemberReads(t)
	h.reconcile(b)
	h.bindCandidate(b, "t1")
	h.reconcile(b)
	if node := h.sourcePod(b).Spec.NodeName; node != target.NodeNameOf("t1") {
		t.Fatalf("b bound to %q after its candidate bound in t1, want %s", node, target.NodeNameOf("t1"))
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("an allowed member's rounds read its gang's members %d times, want none", n)
	}
	// b bound is read from the source pod, not from its candidate: a
	// third member, not bound, is what a look at the gang reads.
	c := h.newSourcePod("c", inPair)
	h.reconcile(c)
	h.reserve(a, "t1", onNode{name: "n2", score: 50})
	reads.Store(0)
	h.reconcile(a)
	if reads.Load() == 0 {
		t.Error("a member reserved anew was not looked at with its gang")
	}
}
