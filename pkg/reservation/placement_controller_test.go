package reservation_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/gang"
	"github.com/flotilla-dev/flotilla/pkg/policy"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
	"github.com/flotilla-dev/flotilla/pkg/target"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

// The placement controller driven one Reconcile at a time against small
// fakes: the source cluster's API server and each target's are client-go
// fake clientsets, the agent's cache of source pods is an indexer the
// harness refreshes before every Reconcile, and each target's scheduler is
// played by the test, which writes the reports the Flotilla plugin writes
// (pkg/scheduler/plugin/core) on the candidates.

// TestElectsOneAndBindsToIt: with both candidates reserved, one Reconcile
// elects exactly one reservation, records it on the source pod and allows
// that candidate alone; once it is bound, the source pod is bound to its
// target's virtual node and the other candidate is deleted.
func TestElectsOneAndBindsToIt(t *testing.T) {
	h := newHarness(t, twoTargets())
	pod := h.newSourcePod("web-0")

	h.reconcile(pod) // fan-out
	h.reserve(pod, "t1", onNode{name: "n1"})
	h.reserve(pod, "t2", onNode{name: "n2"})
	h.reconcile(pod)
	h.reconcile(pod) // a second look changes nothing while the elected candidate binds

	e := h.election(pod)
	if e.Generation != 1 || (e.Target != "t1" && e.Target != "t2") {
		t.Fatalf("election %s, want generation 1 of t1 or t2", e.Encode())
	}
	loser := "t1"
	if e.Target == "t1" {
		loser = "t2"
	}
	want := protocol.Allowance{SourceUID: string(pod.UID), Generation: e.Generation, Nonce: h.state(pod, e.Target).Nonce}
	if got := h.allowance(pod, e.Target); got != want.Encode() {
		t.Errorf("elected candidate in %s carries allowance %q, want %q", e.Target, got, want.Encode())
	}
	if got := h.allowance(pod, loser); got != "" {
		t.Errorf("candidate in %s, not elected, carries allowance %q", loser, got)
	}
	if node := h.sourcePod(pod).Spec.NodeName; node != "" {
		t.Fatalf("source pod bound to %s before its candidate was", node)
	}

	h.bindCandidate(pod, e.Target)
	h.reconcile(pod)

	if got, want := h.sourcePod(pod).Spec.NodeName, h.targets[e.Target].NodeName; got != want {
		t.Errorf("source pod bound to %q, want the virtual node %q of elected target %s", got, want, e.Target)
	}
	if h.candidate(pod, loser) != nil {
		t.Errorf("candidate in %s, not elected, still there after the bind", loser)
	}
	if h.candidate(pod, e.Target) == nil {
		t.Errorf("the elected candidate in %s, which runs the pod, was deleted", e.Target)
	}
}

// TestNoAllowanceWithoutDurableElection: an election the source pod does
// not record (the write loses the optimistic-concurrency race, or the API
// server fails) allows no candidate: the allowance leaves only once the
// election is durable.
func TestNoAllowanceWithoutDurableElection(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
	}{
		{name: "conflict", err: apierrors.NewConflict(corev1.Resource("pods"), "web-0", errors.New("the object has been modified"))},
		{name: "server error", err: apierrors.NewInternalError(errors.New("etcd is gone"))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, twoTargets())
			pod := h.newSourcePod("web-0")
			h.reconcile(pod)
			h.reserve(pod, "t1", onNode{name: "n1"})
			h.reserve(pod, "t2", onNode{name: "n2"})

			h.failElectionWrites(tt.err)
			if _, err := h.tryReconcile(pod); err == nil && !apierrors.IsConflict(tt.err) {
				t.Errorf("Reconcile returned no error though the election could not be written")
			}

			if e := h.election(pod); e.Elected() {
				t.Fatalf("election %s recorded though every write of it failed", e.Encode())
			}
			for _, name := range []string{"t1", "t2"} {
				if got := h.allowance(pod, name); got != "" {
					t.Errorf("candidate in %s allowed (%q) on an election the source pod does not hold", name, got)
				}
			}
		})
	}
}

// TestSpreadJudgesTheFirstElection: under a DoNotSchedule zone spread of
// maxSkew 1, a pod whose candidates reserve a node in each zone is elected
// in a zone only if its siblings' count allows it: never in zone a when
// zone a holds one sibling more than zone b, however much better that
// reservation scores. The siblings are placed after the pod's candidates
// went out, as in a burst, so that only the election's judgement can keep
// the pod out of zone a. The zones are the targets' (their labels), or
// only known from the nodes the targets report when they reserve.
func TestSpreadJudgesTheFirstElection(t *testing.T) {
	for _, tt := range []struct {
		name string
		// siblings are the zones of the workload's pods already placed.
		siblings []string
		// elected: the siblings are elected, not bound yet.
		elected bool
		// reported: the targets carry no zone label; the reservations
		// report their node's.
		reported bool
		want     string
	}{
		{name: "zone a holds one more: b", siblings: []string{"a"}, want: "tb"},
		{name: "zone a holds one more, elected not yet bound: b", siblings: []string{"a"}, elected: true, want: "tb"},
		{name: "zone a holds one more, zones reported per node: b", siblings: []string{"a"}, reported: true, want: "tb"},
		{name: "zone a holds two more: b", siblings: []string{"a", "a"}, want: "tb"},
		{name: "balanced: the better score", siblings: []string{"a", "b"}, want: "ta"},
		{name: "zone b holds one more: a", siblings: []string{"b"}, want: "ta"},
		{name: "zone b holds one more, zones reported per node: a", siblings: []string{"b"}, reported: true, want: "ta"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			targets := zonedTargets()
			if tt.reported {
				targets = []target.Config{{Name: "ta"}, {Name: "tb"}}
			}
			h := newHarness(t, targets, zoneSpread())
			pod := h.newSourcePod("web-new", ofWorkload)
			h.reconcile(pod) // fan-out, to both: no sibling is placed yet
			for i, zone := range tt.siblings {
				h.placedSibling(fmt.Sprintf("web-placed-%d", i), "t"+zone, zone, !tt.elected)
			}
			// The reservation in zone a scores far better: only the
			// spread can pass it over.
			h.reserve(pod, "ta", onNode{name: "a1", zone: "a", score: 90})
			h.reserve(pod, "tb", onNode{name: "b1", zone: "b", score: 10})
			h.reconcile(pod)

			e := h.election(pod)
			if e.Target != tt.want {
				t.Fatalf("elected %q (%s), want %s", e.Target, e.Encode(), tt.want)
			}
			for _, name := range []string{"ta", "tb"} {
				if allowed := h.allowance(pod, name) != ""; allowed != (name == tt.want) {
					t.Errorf("candidate in %s allowed: %v, want %v", name, allowed, name == tt.want)
				}
			}
		})
	}
}

// TestSpreadJudgesTheReElection: when the elected reservation in zone b is
// released (its Permit timed out), the election moves only where the
// spread allows: not to the reservation that has waited in zone a all
// along, which would put two of the workload's pods in zone a and none in
// zone b. The next reservation in zone b is elected.
func TestSpreadJudgesTheReElection(t *testing.T) {
	h := newHarness(t, zonedTargets(), zoneSpread())
	pod := h.newSourcePod("web-new", ofWorkload)
	h.reconcile(pod)
	h.placedSibling("web-placed", "ta", "a", true)
	h.reserve(pod, "ta", onNode{name: "a1", zone: "a", score: 90})
	h.reserve(pod, "tb", onNode{name: "b1", zone: "b", score: 10})
	h.reconcile(pod)
	if e := h.election(pod); e.Target != "tb" {
		t.Fatalf("first election %s, want tb", e.Encode())
	}

	h.unreserve(pod, "tb", "rejected due to timeout after waiting 30s at plugin Flotilla")
	h.reconcile(pod)
	h.reconcile(pod) // a second look changes nothing: the election stays open
	e := h.election(pod)
	if e.Target == "ta" || h.allowance(pod, "ta") != "" {
		t.Fatalf("re-elected ta in zone a (%s, allowance %q) against the spread", e.Encode(), h.allowance(pod, "ta"))
	}
	if e.Elected() || e.Generation != 2 {
		t.Errorf("election %s after the elected reservation was released, want generation 2 withdrawn", e.Encode())
	}

	h.reserve(pod, "tb", onNode{name: "b2", zone: "b", score: 10})
	h.reconcile(pod)
	e = h.election(pod)
	if e.Target != "tb" || e.Nonce != h.state(pod, "tb").Nonce {
		t.Fatalf("election %s, want tb's new reservation %s", e.Encode(), h.state(pod, "tb").Nonce)
	}
	if got := h.allowance(pod, "ta"); got != "" {
		t.Errorf("candidate in zone a allowed: %q", got)
	}
}

// TestSpreadRemembersTheReleasedDomain: targets without zone labels (and
// no summary) make zones known only as their schedulers report nodes. The
// pod's reservation in zone b is elected, then released; zone b is then
// known only from the pod's own election, and still counts: the
// reservation in zone a, which a sibling holds already, is not elected.
func TestSpreadRemembersTheReleasedDomain(t *testing.T) {
	h := newHarness(t, twoTargets(), zoneSpread())
	pod := h.newSourcePod("web-new", ofWorkload)
	h.reconcile(pod)
	h.placedSibling("web-placed", "t1", "a", true)
	h.reserve(pod, "t2", onNode{name: "b1", zone: "b", score: 10})
	h.reconcile(pod)
	if e := h.election(pod); e.Target != "t2" {
		t.Fatalf("first election %s, want t2 (zone b)", e.Encode())
	}
	h.unreserve(pod, "t2", "rejected due to timeout after waiting 30s at plugin Flotilla")
	h.reserve(pod, "t1", onNode{name: "a1", zone: "a", score: 90})
	h.reconcile(pod)
	h.reconcile(pod)
	if e := h.election(pod); e.Target == "t1" || h.allowance(pod, "t1") != "" {
		t.Fatalf("re-elected t1 in zone a (%s, allowance %q): zone b, released, was forgotten", e.Encode(), h.allowance(pod, "t1"))
	}
}

// TestUnschedulableEverywhere: a pod that no target can run says so as
// kube-scheduler says it of a pod no node can run: PodScheduled=False,
// reason Unschedulable, with each target's reason in the message.
func TestUnschedulableEverywhere(t *testing.T) {
	h := newHarness(t, twoTargets())
	pod := h.newSourcePod("web-0")
	h.reconcile(pod)
	h.unschedulable(pod, "t1", "0/3 nodes are available: 3 Insufficient cpu.")
	h.unschedulable(pod, "t2", "0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector.")
	h.reconcile(pod)

	var cond *corev1.PodCondition
	for _, c := range h.sourcePod(pod).Status.Conditions {
		if c.Type == corev1.PodScheduled {
			cond = &c
		}
	}
	if cond == nil {
		t.Fatal("no PodScheduled condition on the source pod")
	}
	if cond.Status != corev1.ConditionFalse || cond.Reason != corev1.PodReasonUnschedulable {
		t.Errorf("PodScheduled %s, reason %q, want False, Unschedulable", cond.Status, cond.Reason)
	}
	for _, want := range []string{
		"0/2 targets",
		"t1: 0/3 nodes are available: 3 Insufficient cpu.",
		"t2: 0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector.",
	} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("condition message %q does not say %q", cond.Message, want)
		}
	}
	if e := h.election(pod); e.Elected() {
		t.Errorf("elected %s though no target reserved", e.Encode())
	}
}

// sourceCluster is the name the source cluster gives itself.
const sourceCluster = "src"

// namespace is where the source pods live, and their candidates go.
const namespace = "default"

// zoneKey is the topology key of the spread tests.
const zoneKey = "topology.kubernetes.io/zone"

var podsResource = corev1.SchemeGroupVersion.WithResource("pods")

// harness is a source cluster, its targets and the placement controller
// between them.
type harness struct {
	t   *testing.T
	ctx context.Context
	// source is the source cluster's API server.
	source *kubefake.Clientset
	// cache is the agent's cache of source pods (Controller.Client reads
	// pods from it, Controller.SourcePods is it), refreshed from source
	// before every Reconcile.
	cache   toolscache.Indexer
	targets map[string]*fakeTarget
	c       *reservation.Controller
	// reservations counts the reservations made, for their nonces.
	reservations int
}

// fakeTarget is a target and its API server, where the test plays the
// target's scheduler.
type fakeTarget struct {
	*target.Target
	api *kubefake.Clientset
	// hidden are the names of the candidates whose changes the target's
	// cache does not hear of (hideCandidate).
	hidden sync.Map
}

// shown filters the events of the target's watch: none of a hidden
// candidate.
func (tg *fakeTarget) shown(ev watch.Event) (watch.Event, bool) {
	if o, ok := ev.Object.(metav1.Object); ok {
		if _, hide := tg.hidden.Load(o.GetName()); hide {
			return ev, false
		}
	}
	return ev, true
}

// hideCandidate keeps every change of the pod's candidate in the target
// from its cache from now on: the cache lags, as an informer's may behind
// what a live read of the API server says.
func (h *harness) hideCandidate(pod *corev1.Pod, targetName string) {
	h.targets[targetName].hidden.Store(candidate.CandidateNameOf(pod, sourceCluster, targetName), true)
}

// twoTargets are two targets alike.
func twoTargets() []target.Config { return []target.Config{{Name: "t1"}, {Name: "t2"}} }

// zonedTargets are target ta, all of whose nodes are in zone a, and tb,
// in zone b: the zone is a label of the target.
func zonedTargets() []target.Config {
	return []target.Config{
		{Name: "ta", Labels: map[string]string{zoneKey: "a"}},
		{Name: "tb", Labels: map[string]string{zoneKey: "b"}},
	}
}

// newHarness starts the targets, each over a fake API server of its own,
// and a controller with the given PlacementPolicies in the source.
func newHarness(t *testing.T, targets []target.Config, policies ...*v1alpha1.PlacementPolicy) *harness {
	t.Helper()
	// The fake clientset does not stream a watch's initial list.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	h := &harness{t: t, ctx: t.Context(), source: kubefake.NewClientset(), targets: map[string]*fakeTarget{}}
	h.source.PrependReactor("create", "pods", h.bindReactor)

	inf := toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &corev1.Pod{}, 0, toolscache.Indexers{})
	if err := workload.IndexSiblings(inf); err != nil {
		t.Fatal(err)
	}
	if err := gang.IndexMembers(inf); err != nil {
		t.Fatal(err)
	}
	// Never run: the harness fills its store (sync), so that each
	// Reconcile sees the source as it is when it starts.
	h.cache = inf.GetIndexer()

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	objs := make([]client.Object, len(policies))
	for i, p := range policies {
		objs[i] = p
	}
	crClient := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{Get: h.getCachedPod}).Build()

	var all []*target.Target
	for _, cfg := range targets {
		api := kubefake.NewClientset()
		ft := &fakeTarget{api: api}
		// The target's cache watches through a filter that can hold back
		// a candidate (hideCandidate), as a cache that lags.
		api.PrependWatchReactor("pods", func(action k8stesting.Action) (bool, watch.Interface, error) {
			var opts metav1.ListOptions
			if w, ok := action.(k8stesting.WatchActionImpl); ok {
				opts = w.ListOptions
			}
			w, err := api.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
			if err != nil {
				return false, nil, err
			}
			return true, watch.Filter(w, ft.shown), nil
		})
		// Its API server gives every object a UID, as a real one does (a
		// copy's owners are candidates, by UID).
		var made atomic.Int64
		api.PrependReactor("create", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
			if o, ok := action.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && o.GetUID() == "" {
				o.SetUID(types.UID(fmt.Sprintf("%s-uid-%d", cfg.Name, made.Add(1))))
			}
			return false, nil, nil
		})
		cfg.SourceCluster = sourceCluster
		tg, err := target.NewWithClient(cfg, api)
		if err != nil {
			t.Fatal(err)
		}
		ft.Target = tg
		ctx, cancel := context.WithCancel(h.ctx)
		tg.Start(ctx)
		t.Cleanup(func() { cancel(); tg.Shutdown() })
		h.targets[cfg.Name] = ft
		all = append(all, tg)
	}
	for _, tg := range h.targets {
		if err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return tg.HasSynced(), nil
		}); err != nil {
			t.Fatalf("target %s: candidates never listed: %v", tg.Name, err)
		}
	}
	h.c = &reservation.Controller{
		Client:        crClient,
		Kube:          h.source,
		SourceCluster: sourceCluster,
		Targets:       target.NewSet(all...),
		// Nothing reads the Events: a buffer that never fills.
		Recorder:   events.NewFakeRecorder(1000),
		Policies:   &policy.Resolver{Reader: crClient},
		SourcePods: h.cache,
	}
	return h
}

// zoneSpread is a policy that spreads the app=web pods over zones,
// maxSkew 1, DoNotSchedule.
func zoneSpread() *v1alpha1.PlacementPolicy {
	return &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "spread"},
		Spec: v1alpha1.PlacementPolicySpec{
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			SpreadConstraints: []v1alpha1.SpreadConstraint{{TopologyKey: zoneKey, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.DoNotSchedule}},
		},
	}
}

// newSourcePod creates a pod as the webhook leaves it: its spec saved,
// served by no scheduler of the source, tolerating the virtual nodes.
func (h *harness) newSourcePod(name string, opts ...func(*corev1.Pod)) *corev1.Pod {
	h.t.Helper()
	spec := corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: "nginx",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
	}}}
	fields, err := sourcespec.FieldsOf(&spec).Encode()
	if err != nil {
		h.t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name, UID: types.UID("uid-" + name),
			Labels:      map[string]string{"app": "web", protocol.ElectLabel: "true"},
			Annotations: map[string]string{protocol.OriginalFieldsAnnotation: fields},
		},
		Spec: *spec.DeepCopy(),
	}
	pod.Spec.SchedulerName = protocol.SourceSchedulerName
	pod.Spec.Tolerations = []corev1.Toleration{{Key: protocol.VirtualNodeTaintKey, Operator: corev1.TolerationOpExists}}
	for _, o := range opts {
		o(pod)
	}
	created, err := h.source.CoreV1().Pods(namespace).Create(h.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return created
}

// ofWorkload makes a source pod one of the web Deployment's.
func ofWorkload(pod *corev1.Pod) {
	pod.Labels["pod-template-hash"] = "5d8f"
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f", UID: "rs-uid", Controller: ptr.To(true)}}
}

// placedSibling creates a pod of the web Deployment that the agent placed
// earlier: elected in targetName on a node of zone, and bound to the
// target's virtual node if bound. Its candidate is not modelled: the
// spread counts it from the source pod.
func (h *harness) placedSibling(name, targetName, zone string, bound bool) {
	h.t.Helper()
	tg, ok := h.targets[targetName]
	if !ok {
		h.t.Fatalf("no target %s", targetName)
	}
	h.newSourcePod(name, ofWorkload, func(pod *corev1.Pod) {
		pod.Annotations[protocol.ElectionAnnotation] = protocol.Election{Generation: 1, Target: targetName, Nonce: "n-" + name}.Encode()
		pod.Annotations[protocol.ElectedDomainAnnotation] = protocol.EncodeDomain(map[string]string{zoneKey: zone})
		if bound {
			pod.Spec.NodeName = tg.NodeName
		}
	})
}

// reconcile runs one Reconcile of the pod once every cache has caught up
// with its API server, and fails the test on an error.
func (h *harness) reconcile(pod *corev1.Pod) reconcile.Result {
	h.t.Helper()
	res, err := h.tryReconcile(pod)
	if err != nil {
		h.t.Fatalf("Reconcile %s: %v", pod.Name, err)
	}
	return res
}

// tryReconcile is reconcile that returns the error.
func (h *harness) tryReconcile(pod *corev1.Pod) (reconcile.Result, error) {
	h.t.Helper()
	h.syncTargets()
	h.syncSource()
	return h.c.Reconcile(h.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}})
}

// syncSource makes the agent's cache of source pods what the source's API
// server holds.
func (h *harness) syncSource() {
	h.t.Helper()
	list, err := h.source.Tracker().List(podsResource, corev1.SchemeGroupVersion.WithKind("Pod"), "")
	if err != nil {
		h.t.Fatal(err)
	}
	var items []any
	for i := range list.(*corev1.PodList).Items {
		items = append(items, &list.(*corev1.PodList).Items[i])
	}
	if err := h.cache.Replace(items, ""); err != nil {
		h.t.Fatal(err)
	}
}

// getCachedPod serves Controller.Client's reads of pods from the agent's
// cache, as the manager's client does.
func (h *harness) getCachedPod(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return c.Get(ctx, key, obj, opts...)
	}
	cached, exists, err := h.cache.GetByKey(key.String())
	if err != nil {
		return err
	}
	if !exists {
		return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
	}
	cached.(*corev1.Pod).DeepCopyInto(pod)
	return nil
}

// syncTargets waits until every target's cache holds its candidates as
// its API server does.
func (h *harness) syncTargets() {
	h.t.Helper()
	for name, tg := range h.targets {
		err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return tg.caughtUp()
		})
		if err != nil {
			h.t.Fatalf("target %s: the cache never caught up with its API server: %v", name, err)
		}
	}
}

// caughtUp reports whether the target's cache shows every candidate as
// its API server holds it, in what the source reads of one.
func (tg *fakeTarget) caughtUp() (bool, error) {
	list, err := tg.api.Tracker().List(podsResource, corev1.SchemeGroupVersion.WithKind("Pod"), "")
	if err != nil {
		return false, err
	}
	live := slices.DeleteFunc(list.(*corev1.PodList).Items, func(p corev1.Pod) bool {
		_, hidden := tg.hidden.Load(p.Name)
		return hidden
	})
	if len(live) != tg.CandidateCount() {
		return false, nil
	}
	for i := range live {
		p := &live[i]
		cached, ok := tg.Candidate(p.Namespace, p.Name)
		if !ok || !maps.Equal(cached.Annotations, p.Annotations) || cached.Spec.NodeName != p.Spec.NodeName ||
			!equality.Semantic.DeepEqual(cached.Status.Conditions, p.Status.Conditions) {
			return false, nil
		}
	}
	return true, nil
}

// bindReactor binds a pod as the API server's pods/binding does: once,
// to the binding's node; a pod bound already, or another pod under the
// name, is a conflict.
func (h *harness) bindReactor(action k8stesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() != "binding" {
		return false, nil, nil
	}
	b := action.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
	obj, err := h.source.Tracker().Get(podsResource, action.GetNamespace(), b.Name)
	if err != nil {
		return true, nil, err
	}
	pod := obj.(*corev1.Pod).DeepCopy()
	switch {
	case b.UID != "" && b.UID != pod.UID:
		return true, nil, apierrors.NewConflict(corev1.Resource("pods/binding"), b.Name, fmt.Errorf("the UID in the binding %s does not match the pod's %s", b.UID, pod.UID))
	case pod.Spec.NodeName != "":
		return true, nil, apierrors.NewConflict(corev1.Resource("pods/binding"), b.Name, fmt.Errorf("pod %s is already assigned to node %q", b.Name, pod.Spec.NodeName))
	}
	pod.Spec.NodeName = b.Target.Name
	return true, b, h.source.Tracker().Update(podsResource, pod, pod.Namespace)
}

// failElectionWrites makes the source's API server refuse, with err, every
// write of a source pod that records an election.
func (h *harness) failElectionWrites(err error) {
	recordsElection := func(action k8stesting.Action) bool {
		switch a := action.(type) {
		case k8stesting.UpdateAction:
			pod, ok := a.GetObject().(*corev1.Pod)
			return ok && pod.Annotations[protocol.ElectionAnnotation] != ""
		case k8stesting.PatchAction:
			return strings.Contains(string(a.GetPatch()), protocol.ElectionAnnotation)
		}
		return false
	}
	for _, verb := range []string{"update", "patch"} {
		h.source.PrependReactor(verb, "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
			if recordsElection(action) {
				return true, nil, err
			}
			return false, nil, nil
		})
	}
}

// onNode is a node of a target that reserves a candidate: its name, its
// zone ("": no zone label) and the score the target gave it.
type onNode struct {
	name, zone string
	score      int64
}

// reserve plays the target's scheduler reserving a node for the pod's
// candidate: a new reservation, with a nonce of its own.
func (h *harness) reserve(pod *corev1.Pod, targetName string, n onNode) {
	h.t.Helper()
	h.reservations++
	s := protocol.State{Phase: protocol.PhaseReserved, Nonce: fmt.Sprintf("%s-%s-%d", targetName, n.name, h.reservations), Node: n.name, Score: n.score}
	if n.zone != "" {
		s.Topology = map[string]string{zoneKey: n.zone}
	}
	h.updateCandidate(pod, targetName, func(c *corev1.Pod) { setState(c, s) })
}

// unreserve plays the target's scheduler giving up the candidate's
// reservation (its Permit timed out, or another plugin rejected it).
func (h *harness) unreserve(pod *corev1.Pod, targetName, reason string) {
	h.t.Helper()
	s := h.state(pod, targetName)
	h.updateCandidate(pod, targetName, func(c *corev1.Pod) {
		setState(c, protocol.State{Phase: protocol.PhaseUnreserved, Nonce: s.Nonce, Node: s.Node, Reason: reason})
	})
}

// bindCandidate plays the target's scheduler binding the candidate to the
// node it reserved; the binding carries the Bound report.
func (h *harness) bindCandidate(pod *corev1.Pod, targetName string) {
	h.t.Helper()
	s := h.state(pod, targetName)
	h.updateCandidate(pod, targetName, func(c *corev1.Pod) {
		c.Spec.NodeName = s.Node
		setState(c, protocol.State{Phase: protocol.PhaseBound, Nonce: s.Nonce, Node: s.Node, Topology: s.Topology})
	})
}

// unschedulable plays the target's scheduler finding no node for the
// candidate.
func (h *harness) unschedulable(pod *corev1.Pod, targetName, msg string) {
	h.t.Helper()
	h.updateCandidate(pod, targetName, func(c *corev1.Pod) {
		c.Status.Conditions = []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg,
		}}
	})
}

func setState(c *corev1.Pod, s protocol.State) {
	raw, _ := json.Marshal(s)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[protocol.StateAnnotation] = string(raw)
}

// updateCandidate changes the pod's candidate in a target's API server.
func (h *harness) updateCandidate(pod *corev1.Pod, targetName string, change func(*corev1.Pod)) {
	h.t.Helper()
	c := h.candidate(pod, targetName)
	if c == nil {
		h.t.Fatalf("target %s holds no candidate of %s", targetName, pod.Name)
	}
	change(c)
	if err := h.targets[targetName].api.Tracker().Update(podsResource, c, c.Namespace); err != nil {
		h.t.Fatal(err)
	}
}

// candidate is the pod's candidate as the target's API server holds it,
// nil when there is none.
func (h *harness) candidate(pod *corev1.Pod, targetName string) *corev1.Pod {
	h.t.Helper()
	tg, ok := h.targets[targetName]
	if !ok {
		h.t.Fatalf("no target %s", targetName)
	}
	c, err := tg.api.CoreV1().Pods(tg.NamespaceFor(pod.Namespace)).Get(h.ctx, candidate.CandidateNameOf(pod, sourceCluster, targetName), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// state is what the target's scheduler last reported on the candidate.
func (h *harness) state(pod *corev1.Pod, targetName string) protocol.State {
	h.t.Helper()
	var s protocol.State
	c := h.candidate(pod, targetName)
	if c == nil {
		h.t.Fatalf("target %s holds no candidate of %s", targetName, pod.Name)
	}
	if raw := c.Annotations[protocol.StateAnnotation]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			h.t.Fatal(err)
		}
	}
	return s
}

// allowance is the allowance on the candidate in a target, "" if none (or
// no candidate).
func (h *harness) allowance(pod *corev1.Pod, targetName string) string {
	h.t.Helper()
	if c := h.candidate(pod, targetName); c != nil {
		return c.Annotations[protocol.AllowedAnnotation]
	}
	return ""
}

// sourcePod is the pod as the source's API server holds it.
func (h *harness) sourcePod(pod *corev1.Pod) *corev1.Pod {
	h.t.Helper()
	live, err := h.source.CoreV1().Pods(pod.Namespace).Get(h.ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return live
}

// election is the election recorded on the source pod.
func (h *harness) election(pod *corev1.Pod) protocol.Election {
	h.t.Helper()
	e, err := protocol.ParseElection(h.sourcePod(pod).Annotations[protocol.ElectionAnnotation])
	if err != nil {
		h.t.Fatal(err)
	}
	return e
}
