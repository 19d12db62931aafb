package reservation

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
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
// It keeps no state of its own between reconciles: everything it needs is on
// the source pod (the election) and on the candidates (the targets' reports).
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
	// ClusterSummary weighs the others (local.View.Free); ok false, or nil,
	// leaves its room unknown.
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
	// firstReserved is when a pod's first reservation was seen, for a
	// policy's scoring window (forgotten on restart: the window then
	// starts again, which only delays the election).
	firstReserved sync.Map
	// problems holds, per pod UID, the policy problem last reported
	// (reported), so it is reported once.
	problems sync.Map

	// gangQueue orders this source's gangs that wait (gangs()).
	gangQueue     *gang.Queue
	gangQueueOnce sync.Once
	// gangSizes remembers, per gang key, the size its owner gives
	// (gangSize).
	gangSizes sync.Map

	// bound holds the UIDs of source pods this process bound and whose
	// binding the cache may not show yet, so a stale reconcile does not
	// bind again (the API server would refuse it, at the cost of a write).
	bound sync.Map
	// elections holds the election this process last wrote on a source pod
	// (by UID) until the cache shows it: a reconcile on an older copy would
	// only lose the optimistic-concurrency race, at the cost of a write.
	elections sync.Map
	// electedDomains holds, per pod UID, the domain of the node of the
	// pod's last elected reservation, as its target reported it: once
	// released, it still counts among the domains a re-election judges
	// against (forgotten on restart and when the pod is placed).
	electedDomains sync.Map
	// fullDomains holds, per pod UID, the domains (per target) where the
	// pod's candidate, pinned there, found no node: its next candidate in
	// that target is pinned to another domain the spread allows, as
	// kube-scheduler tries a pod on the nodes of every allowed domain
	// (forgotten after rememberFullFor, on restart, and once placed).
	fullDomains sync.Map
	// electedSince is since when this process has seen each pod wait on its
	// election, for ElectionTimeout.
	electedSince steadyClock
	// denySince is since when each pod has had the same candidates to deny
	// under the same election, for DenyAfter.
	denySince steadyClock
	// repinSince is since when each pod has had the same candidates pinned
	// to closed domains, for repinAfter.
	repinSince steadyClock
	// waiters are the pods the spread narrowed, woken when a sibling moves.
	waiters spreadWaiters
	// changes sends pods to the queue.
	changes chan<- event.TypedGenericEvent[*corev1.Pod]
}

// electedDomain is a domain of a pod's last election.
type electedDomain struct {
	target string
	domain map[string]string
	at     time.Time
}

type writtenElection struct {
	value string
	// domain is the elected-domain annotation written with it.
	domain string
	at     time.Time
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
	v, ok := c.elections.Load(pod.UID)
	if !ok {
		return false
	}
	w := v.(writtenElection)
	if pod.Annotations[protocol.ElectionAnnotation] == w.value || c.now().Sub(w.at) > staleWindow {
		c.elections.Delete(pod.UID)
		return false
	}
	return true
}

// SetupWithManager registers the controller and routes every candidate
// change in every target to its source pod.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	changes := make(chan event.TypedGenericEvent[*corev1.Pod], 1024)
	c.changes = changes
	c.Targets.OnCandidate(func(cand *corev1.Pod) {
		ns, name := cand.Annotations[protocol.SourceNamespaceAnnotation], cand.Annotations[protocol.SourceNameAnnotation]
		if ns == "" || name == "" {
			return
		}
		changes <- event.TypedGenericEvent[*corev1.Pod]{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
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
	return ctrl.NewControllerManagedBy(mgr).
		Named("placement").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(isSourcePod))).
		WatchesRawSource(source.Channel(changes, &handler.TypedEnqueueRequestForObject[*corev1.Pod]{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: workers,
			// Per-pod exponential backoff only: the default also caps all
			// retries together at 10/s, which a burst of pods would hit.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 30*time.Second),
		}).
		Complete(c)
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
			return c.gone(ctx, req, targets)
		}
		return reconcile.Result{}, err
	}
	if !isSourcePod(pod) {
		return reconcile.Result{}, nil
	}
	if pod.DeletionTimestamp != nil {
		// Its siblings' counts change: those it narrowed look again.
		if key := workloadOf(pod); key != "" {
			c.waiters.done(pod.Namespace+"/"+key, req.NamespacedName, false)
		}
		c.wakeSiblings(pod)
		return c.cleanUp(ctx, pod, nothing, targets)
	}
	if pod.Spec.NodeName != "" {
		c.bound.Delete(pod.UID)
		c.forget(pod.UID)
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
		// The update event of our own write will bring the pod back.
		return reconcile.Result{}, nil
	}
	election, err := protocol.ParseElection(pod.Annotations[protocol.ElectionAnnotation])
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

// forget drops what this process remembers of a placed pod.
func (c *Controller) forget(uid types.UID) {
	c.firstReserved.Delete(uid)
	c.electedDomains.Delete(uid)
	c.fullDomains.Delete(uid)
	c.problems.Delete(uid)
	c.problems.Delete(gangProblemKey(uid))
	c.electedSince.forget(uid)
	c.denySince.forget(uid)
	c.repinSince.forget(uid)
}

// sweep drops what this process remembers of pods that went before they
// were placed: their UIDs are no longer known, so old entries go.
func (c *Controller) sweep() {
	// The maps are keyed by UID: entries of pods deleted before they were
	// placed are swept when they grow old.
	now := c.now()
	c.firstReserved.Range(func(k, v any) bool {
		if now.Sub(v.(time.Time)) > staleWindow {
			c.firstReserved.Delete(k)
		}
		return true
	})
	c.fullDomains.Range(func(k, v any) bool {
		if v.(*fullMemo).stale(now) {
			c.fullDomains.Delete(k)
		}
		return true
	})
	c.electedDomains.Range(func(k, v any) bool {
		if now.Sub(v.(electedDomain).at) > rememberDomainFor {
			c.electedDomains.Delete(k)
		}
		return true
	})
	c.electedSince.sweep(now, time.Hour)
	c.denySince.sweep(now, time.Hour)
	c.repinSince.sweep(now, time.Hour)
	c.problems.Range(func(k, v any) bool {
		if now.Sub(v.(reported).at) > time.Hour {
			c.problems.Delete(k)
		}
		return true
	})
	c.gangSizes.Range(func(k, v any) bool {
		if now.Sub(v.(gangSize).at) > gangSizeTTL {
			c.gangSizes.Delete(k)
		}
		return true
	})
}
