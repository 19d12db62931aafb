package reservation

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/gang"
	"github.com/flotilla-dev/flotilla/pkg/objects"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/policy"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// retryUnhealthy is how soon a source pod is looked at again while one of
// its targets is unreachable.
const retryUnhealthy = 5 * time.Second

// narrowedRecheck is how soon a pod the spread holds back is looked at
// again when no sibling has moved meanwhile.
const narrowedRecheck = 15 * time.Second

// staleWindow bounds how long a written election is expected to show up in
// the cache before the cache is believed again.
const staleWindow = 30 * time.Second

// RBAC the placement controller needs in the source cluster.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods/binding,verbs=create
// A gang's size, where its members give none (pkg/gang.SizeOf):
// +kubebuilder:rbac:groups=scheduling.x-k8s.io,resources=podgroups,verbs=get
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=podgroups,verbs=get
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get
// +kubebuilder:rbac:groups=jobset.x-k8s.io,resources=jobsets,verbs=get
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
//
// It runs on the leader only: the agent's leader-election Lease lives in the
// agent's namespace (flotilla-system stands for it).
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=flotilla-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=flotilla-system,resources=events,verbs=create;patch

// Controller places source pods: it fans candidates out, runs the election,
// binds the source pod to the winner's virtual node and cleans up the rest.
//
// What decides a pod's place is on the source pod (the election) and on
// the candidates (the targets' reports). In process it also remembers
// (memory), per pod, the waits it counts across rounds (the scoring
// window, the election timeout, denials, repins), the writes the cache may
// not show yet (an election, a binding), the domain of its last election
// and the domains where its pinned candidates found no node, and the
// problems already reported; per gang, its size; and it keeps the gangs'
// turns (gangQueue) and the pods the spread narrowed (waiters). A restart
// loses it all, which costs only what its expiry costs: the waits and the
// gangs' turns start again, a write on a stale copy loses its
// optimistic-concurrency race, a released election's domain stops
// counting as it would after rememberDomainFor, a full domain may be
// pinned to once more, a problem is reported once more; and every unbound
// pod is looked at again, as the informers list them.
type Controller struct {
	Client client.Client
	// Reader reads from the API server what the informers do not hold (a
	// gang's PodGroup, Workload, Job or JobSet); Client when nil.
	Reader        client.Reader
	Kube          kubernetes.Interface
	SourceCluster string
	Targets       *target.Set
	Recorder      events.EventRecorder
	// Workers is the number of source pods reconciled at once.
	Workers int
	// MaxCandidates is how many targets get a candidate at first (0: all);
	// see candidate.Eligible for how the set widens.
	MaxCandidates int
	// Objects copies the ConfigMaps and Secrets a pod references into each
	// target before its candidate goes there; nil copies nothing.
	Objects *objects.Copier
	// Policies finds the PlacementPolicy of a pod; nil places every pod
	// as if no policy selected it.
	Policies *policy.Resolver
	// DenyAfter is how long another target's candidate must have stood
	// elected, unbound, before the other candidates are denied, so that
	// they hold no node in their targets; 0 denies none.
	DenyAfter time.Duration
	// SourcePods is the informer's store that Client reads source pods
	// from, indexed by workload.IndexSiblings: a spread policy counts a
	// pod's siblings there, without the copy of each that a List makes.
	SourcePods toolscache.Indexer
	// SelfFree is what this cluster has free, weighing a self target as a
	// ClusterSummary weighs the others (local.View.Weigh); ok false, or
	// nil, leaves its room unknown.
	SelfFree func() (free corev1.ResourceList, ok bool)
	// SelfTopology is, per key, the values this cluster's nodes carry and
	// the combinations of them (local.Topology.Of), for the spread of a
	// self target, which publishes no summary; ok false, or nil, leaves
	// them unknown.
	SelfTopology func(keys []string) (values map[string][]string, combinations []placement.Combination, ok bool)
	// Clock tells the time of every wait the controller counts (election
	// timeout, denials, repins, the scoring window); nil is the real one.
	Clock clock.PassiveClock
	// ElectionTimeout is how long an elected candidate may stay unbound
	// while its target answers before the source revokes it (deletes it
	// unless it has bound meanwhile) and elects another; 0 never does.
	ElectionTimeout time.Duration

	// locks serialises the elections of a workload's pods under a spread
	// policy.
	locks workloadLocks
	// gangQueue orders this source's gangs that wait (gangs()).
	gangQueue     *gang.Queue
	gangQueueOnce sync.Once
	// memory is what this process remembers of the pods it places, and of
	// their gangs' sizes, between reconciles.
	memory memory
	// stalls tells when this process last came out of a pause or a
	// starvation (confirmOverdue).
	stalls stallWatch
	// waiters are the pods the spread narrowed, woken when a sibling moves.
	waiters spreadWaiters
	// changes sends pods to the queue.
	changes chan<- event.TypedGenericEvent[*corev1.Pod]
}

// now is the controller's clock's time.
func (c *Controller) now() time.Time {
	if c.Clock == nil {
		return time.Now()
	}
	return c.Clock.Now()
}

// staleElection reports whether the cached pod predates an election this
// process wrote less than staleWindow ago.
func (c *Controller) staleElection(pod *corev1.Pod) bool {
	w, ok := c.memory.electionWritten(pod.UID)
	if !ok {
		return false
	}
	if pod.Annotations[protocol.ElectionAnnotation] == w.value || c.now().Sub(w.at) > staleWindow {
		c.memory.forgetElection(pod.UID)
		return false
	}
	return true
}

// SetupWithManager registers the controller and routes every candidate
// change in every target to its source pod.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	changes := make(chan event.TypedGenericEvent[*corev1.Pod], 1024)
	c.changes = changes
	echoes := make(chan event.TypedGenericEvent[*corev1.Pod], 1024)
	c.Targets.OnCandidateChange(func(t *target.Target, old, cand *corev1.Pod) {
		ns, name := cand.Annotations[protocol.SourceNamespaceAnnotation], cand.Annotations[protocol.SourceNameAnnotation]
		if ns == "" || name == "" || (old != nil && !roundReadsChange(old, cand)) || c.delegateOfBound(cand) {
			return
		}
		e := event.TypedGenericEvent[*corev1.Pod]{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
		if t.OwnWrite(cand) {
			echoes <- e
			return
		}
		changes <- e
	})
	// A new target may run the pods that wait: look at each again.
	c.Targets.OnAdd(func(*target.Target) {
		go c.requeueUnbound(context.Background(), changes)
	})
	if c.Objects != nil {
		// A pod that waits for an object is placed once it exists.
		c.Objects.Watcher.OnChange(func(kind objects.Kind, namespace, name string) {
			pods, err := objects.Users(context.Background(), c.Client, kind, namespace, name)
			if err != nil {
				return
			}
			for i := range pods {
				if pods[i].Spec.NodeName == "" {
					changes <- event.TypedGenericEvent[*corev1.Pod]{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: pods[i].Name}}}
				}
			}
		})
	}
	workers := c.Workers
	if workers <= 0 {
		workers = 16
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return c.stalls.run(ctx, c.now) })); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("placement").
		Watches(&corev1.Pod{}, &sourcePodEvents{memory: &c.memory}, builder.WithPredicates(predicate.NewPredicateFuncs(isSourcePod), predicate.Funcs{UpdateFunc: mayMove})).
		WatchesRawSource(source.Channel(changes, &handler.TypedEnqueueRequestForObject[*corev1.Pod]{})).
		WatchesRawSource(source.Channel(echoes, lookAfterEcho)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: workers,
			// Per-pod exponential backoff only: the default also caps all
			// retries together at 10/s, which a burst of pods would hit.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 30*time.Second),
		}).
		Complete(c)
}

// echoDelay is how long the round that the cache's echo of this process's
// own write of a candidate brings (target.Target.OwnWrite: its creation,
// an annotation) waits. Such a round finds there only what the round that
// wrote it knew, but it is not always idle: the writing round planned
// without the candidate it made, and timers (an answer overdue, a window
// to widen) are set by the round after. Delayed, it runs with the next
// change anyone else makes (the target's reservation, its binding) when
// that comes first, as the queue holds one entry a pod: a candidate's
// creation and its allowance each brought a round of their own that
// otherwise ran on nothing new.
const echoDelay = time.Second

// lookAfterEcho sends a pod to the queue echoDelay from now: a round it
// has meanwhile takes its place.
var lookAfterEcho = handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
	GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Object.Namespace, Name: e.Object.Name}}, echoDelay)
	},
}

// sourcePodEvents sends a source pod to the queue on every event of it
// (handler.EnqueueRequestForObject), but the echo of this process's own
// election write (memory.electionEcho), which waits echoDelay as a
// candidate's echo does: the round that wrote it went on with it
// (electionOf), and the next change merges into it. A round that found the
// cache without it (stale) awaits it, and then it comes at once.
type sourcePodEvents struct {
	handler.EnqueueRequestForObject
	memory *memory
}

// Update delays the echo of an election write; any other update is queued
// at once.
func (h *sourcePodEvents) Update(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if pod, ok := e.ObjectNew.(*corev1.Pod); ok && pod.Spec.NodeName == "" && h.memory.electionEcho(pod) {
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}}, echoDelay)
		return
	}
	h.EnqueueRequestForObject.Update(ctx, e, q)
}

// mayMove reports whether an update of a source pod may give its round
// something to do: every update but those of a pod bound to the same node
// before and after, and not being deleted. Those are the status its
// virtual node mirrors from its delegate, and labels or annotations: the
// round of a bound pod (cleanUp) reads neither, and the update that bound
// the pod brought it already (a cleanUp that fails is retried by the
// queue).
func mayMove(e event.UpdateEvent) bool {
	before, ok1 := e.ObjectOld.(*corev1.Pod)
	after, ok2 := e.ObjectNew.(*corev1.Pod)
	if !ok1 || !ok2 {
		return true
	}
	return before.Spec.NodeName == "" || after.Spec.NodeName != before.Spec.NodeName || after.DeletionTimestamp != nil
}

// roundReadsChange reports whether an update of a candidate from old to cand
// changes what a round of its source pod reads of it: its metadata (the
// target's state report, the allowance and denial, its labels, its
// deletion), its spec (the node it is bound to) or its PodScheduled
// condition (why its target's scheduler found no node). The rest of its
// status (its phase, its containers, the other conditions, written by its
// target's kubelet once it is bound) is its virtual node's to mirror: a
// round reads none of it, and an update of that alone would only make the
// round run again on what it saw.
func roundReadsChange(old, cand *corev1.Pod) bool {
	if old.ResourceVersion == cand.ResourceVersion {
		// A resync: the same object.
		return false
	}
	before, after := old.ObjectMeta, cand.ObjectMeta
	before.ResourceVersion, after.ResourceVersion = "", ""
	before.ManagedFields, after.ManagedFields = nil, nil
	return !equality.Semantic.DeepEqual(before, after) ||
		!equality.Semantic.DeepEqual(old.Spec, cand.Spec) ||
		!equality.Semantic.DeepEqual(podScheduled(old), podScheduled(cand))
}

// podScheduled is pod's PodScheduled condition, nil when it has none.
func podScheduled(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// delegateOfBound reports whether cand is bound, and its source pod, as
// the cache holds it, bound too and not being deleted: cand is the pod's
// delegate (a candidate bound beside it was made unbound, and that event
// brought the pod's round, which deletes it). What cand does next (its
// status as it runs) is its virtual node's to mirror; the pod's round has
// nothing left to do with it.
func (c *Controller) delegateOfBound(cand *corev1.Pod) bool {
	if c.SourcePods == nil || cand.Spec.NodeName == "" {
		return false
	}
	obj, ok, err := c.SourcePods.GetByKey(target.SourceKey(cand))
	if err != nil || !ok {
		return false
	}
	pod, ok := obj.(*corev1.Pod)
	return ok && pod.Spec.NodeName != "" && pod.DeletionTimestamp == nil && string(pod.UID) == cand.Labels[protocol.SourceUIDLabel]
}

// requeueUnbound sends every source pod that is not bound yet to the queue.
func (c *Controller) requeueUnbound(ctx context.Context, changes chan<- event.TypedGenericEvent[*corev1.Pod]) {
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "Listing source pods for a new target")
		return
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" && isSourcePod(p) {
			changes <- event.TypedGenericEvent[*corev1.Pod]{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}}
		}
	}
}

// isSourcePod reports whether obj is a pod the webhook made a source pod:
// one with what its candidates run saved (sourcespec.Saved) that no
// scheduler of the source serves. The opt-in label asked for it at
// creation; removing it later changes nothing.
func isSourcePod(obj client.Object) bool {
	pod, ok := obj.(*corev1.Pod)
	return ok && pod.Spec.SchedulerName == protocol.SourceSchedulerName && sourcespec.Saved(pod)
}

// Reconcile moves one source pod one step along the protocol: a deleted
// pod's candidates go, a bound pod keeps only its delegate, and a pod that
// waits for a place takes one round of place.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	targets := c.Targets.Serving(req.Namespace)
	pod := &corev1.Pod{}
	if err := c.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			roundsGone.Inc()
			return c.gone(ctx, req, targets)
		}
		return reconcile.Result{}, err
	}
	if !isSourcePod(pod) {
		return reconcile.Result{}, nil
	}
	if pod.DeletionTimestamp != nil {
		roundsDeleting.Inc()
		// Its siblings' counts change: those it narrowed look again.
		if key := workloadOf(pod); key != "" {
			c.waiters.done(pod.Namespace+"/"+key, req.NamespacedName, false)
		}
		c.wakeSiblings(pod)
		return c.cleanUp(ctx, pod, nothing, targets)
	}
	if pod.Spec.NodeName != "" {
		roundsBound.Inc()
		c.memory.forget(pod.UID)
		if key := workloadOf(pod); key != "" {
			c.waiters.done(pod.Namespace+"/"+key, req.NamespacedName, false)
		}
		// Bound: keep the delegate in the elected target, remove the rest
		// (including candidates of an earlier pod with the same name).
		elected := ""
		if t, ok := c.Targets.OfPod(pod); ok {
			elected = t.Name
		}
		return c.cleanUp(ctx, pod, delegate(pod.UID, elected), targets)
	}
	if c.staleElection(pod) {
		roundsStale.Inc()
		// The update event of our own write will bring the pod back, at
		// once now that it is awaited (its echo would wait echoDelay
		// otherwise). The cache may have taken it, and its event passed,
		// since the pod was read: then the round runs again at once.
		c.memory.awaitElection(pod.UID)
		if !c.staleElection(c.newest(pod)) {
			c.lookAgain([]types.NamespacedName{req.NamespacedName})
		}
		return reconcile.Result{}, nil
	}
	election, err := protocol.ParseElection(pod.Annotations[protocol.ElectionAnnotation])
	if election.Elected() {
		roundsElected.Inc()
	} else {
		roundsWaiting.Inc()
	}
	if err != nil {
		c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "BadElection", "Elect", "Election record is malformed; remove the %s annotation to start over: %v", protocol.ElectionAnnotation, err)
		return reconcile.Result{}, nil
	}
	return c.place(ctx, &round{pod: pod, election: election, targets: targets})
}

// wakeSiblings records that a pod's place among its workload's changed
// (elected, withdrawn, deleted) and sends the siblings the spread narrowed
// to the queue.
func (c *Controller) wakeSiblings(pod *corev1.Pod) {
	key := workloadOf(pod)
	if key == "" {
		return
	}
	c.lookAgain(c.waiters.changed(pod.Namespace + "/" + key))
}

// lookAgain sends pods to the queue, without waiting for it.
func (c *Controller) lookAgain(pods []types.NamespacedName) {
	if len(pods) == 0 || c.changes == nil {
		return
	}
	go func() {
		for _, p := range pods {
			c.changes <- event.TypedGenericEvent[*corev1.Pod]{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}}
		}
	}()
}

// objectsOf is what the pod needs copied into the targets (nil: nothing),
// and the objects it needs that the source does not hold.
func (c *Controller) objectsOf(ctx context.Context, pod *corev1.Pod) (candidate.Preparer, *objects.MissingError) {
	if c.Objects == nil {
		return nil, nil
	}
	needs, err := c.Objects.For(pod)
	if err != nil {
		// The saved spec does not decode: building the candidate fails
		// too, and says so.
		logr.FromContextOrDiscard(ctx).V(2).Info("Listing the objects of the pod failed", "error", err.Error())
		return nil, nil
	}
	if needs == nil {
		return nil, nil
	}
	return needs, needs.Missing()
}
