package reservation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/objects"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/policy"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
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
	Client        client.Client
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
	// SelfTopology is, per key, the values this cluster's nodes carry
	// (local.Topology.Values), for the spread of a self target, which
	// publishes no summary; ok false, or nil, leaves them unknown.
	SelfTopology func(keys []string) (values map[string][]string, ok bool)
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

	// bound holds the UIDs of source pods this process bound and whose
	// binding the cache may not show yet, so a stale reconcile does not
	// bind again (the API server would refuse it, at the cost of a write).
	bound sync.Map
	// elections holds the election this process last wrote on a source pod
	// (by UID) until the cache shows it: a reconcile on an older copy would
	// only lose the optimistic-concurrency race, at the cost of a write.
	elections sync.Map
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

type writtenElection struct {
	value string
	// domain is the elected-domain annotation written with it.
	domain string
	at     time.Time
}

// staleElection reports whether the cached pod predates an election this
// process wrote less than staleWindow ago.
func (c *Controller) staleElection(pod *corev1.Pod) bool {
	v, ok := c.elections.Load(pod.UID)
	if !ok {
		return false
	}
	w := v.(writtenElection)
	if pod.Annotations[protocol.ElectionAnnotation] == w.value || time.Since(w.at) > staleWindow {
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
// one with the saved spec that no scheduler of the source serves. The
// opt-in label asked for it at creation; removing it later changes nothing.
func isSourcePod(obj client.Object) bool {
	pod, ok := obj.(*corev1.Pod)
	return ok && pod.Spec.SchedulerName == protocol.SourceSchedulerName && pod.Annotations[protocol.SourceSpecAnnotation] != ""
}

// Reconcile moves one source pod one step along the protocol.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
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
		if t, ok := c.Targets.ByVirtualNode(pod.Spec.NodeName); ok {
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
	invited, uninvited := candidate.Invited(pod, targets)
	pl, problem, err := c.planFor(ctx, pod, invited)
	if err != nil {
		return reconcile.Result{}, err
	}
	if problem != "" {
		c.reportProblem(pod, problem)
	}
	prep, missing := c.objectsOf(ctx, pod)
	switch {
	case missing != nil:
		// The object's appearance brings the pod back.
		c.reportUnscheduled(ctx, pod, ReasonObjectMissing, "Fan out", missing.Error()+"; no target gets a candidate until it exists")
	case len(uninvited) > 0 && len(invited) == 0:
		// No target may take the pod here: that is why it waits. When
		// some target may, the pod waits for it, and the skipped ones
		// are named only if none of those can run it either.
		c.reportUninvited(ctx, pod, uninvited, len(targets))
	case len(targets) == 0:
		// No silent wait: say so, as kube-scheduler says of a cluster
		// without a node. A target added later looks at the pod again.
		why := unschedulableMessage("no target of this cluster takes pods of namespace "+pod.Namespace, nil, 0)
		if c.setUnschedulable(ctx, pod, why) {
			c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "NoTargetAvailable", "Elect", "%s", why)
		}
	}
	unhealthy := false
	if err := c.cleanUpOthers(ctx, pod, targets); err != nil {
		log.Info("Deleting candidates of an earlier pod of the same name failed; will retry", "error", err.Error())
		unhealthy = true
	}
	waitKey, seen := "", uint64(0)
	var placed []placement.Domain
	if pl.policy.Spreads() {
		if key := workloadOf(pod); key != "" {
			waitKey = pod.Namespace + "/" + key
			seen = c.waiters.begin(waitKey)
		}
		// Counted without the workload's lock: only which targets get a
		// candidate depends on it; the election counts again under it.
		if placed, err = c.siblingDomains(ctx, pod, &pl); err != nil {
			if waitKey != "" {
				c.waiters.done(waitKey, req.NamespacedName, true)
			}
			return reconcile.Result{}, err
		}
		c.prepareFanOut(&pl, placed)
	}
	if len(pl.excluded) > 0 && len(pl.selected) == 0 && len(invited) > 0 {
		// Spread may allow a target again once siblings move: look again.
		// Unschedulable, as kube-scheduler says of a pod its filters
		// leave no node for; the Event says it was the policy (or the
		// targets' summaries, or a target held back).
		if why := pl.exclusions(); c.setUnschedulable(ctx, pod, unschedulableMessage(why, nil, len(targets))) {
			c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonPolicyUnsatisfiable, "Fan out", "%s", why)
		}
		unhealthy = true
	}
	eligible := candidate.ToFanOut(pod, c.SourceCluster, pl.selected, c.MaxCandidates, c.prospects(&pl), election.Elected())
	placements := candidate.FanOut(ctx, pod, c.SourceCluster, eligible, prep, pl.shaper())
	c.reportFanOut(pod, placements, &pl)
	// Candidates the policy no longer sends (it changed, or the spread
	// moved) are still looked at: a bound one must be adopted, and the
	// others are never elected.
	placements = append(placements, c.leftOut(pod, invited, eligible, &pl)...)
	// endCount ends the count begun above: a pod the spread narrowed (a
	// target excluded, or every reservation it holds) waits for a sibling
	// to move; it reports whether one moved meanwhile, to count again now.
	waiting := false
	endCount := func(narrowed bool) (lookAgain bool) {
		if waitKey == "" {
			return false
		}
		key := waitKey
		waitKey = ""
		if narrowed {
			waiting = true
			return c.waiters.wait(key, req.NamespacedName, seen)
		}
		c.waiters.done(key, req.NamespacedName, true)
		return false
	}
	lookAgain := false
	observed := make([]Observed, 0, len(placements))
	for _, p := range placements {
		o := observe(p)
		if why, ok := pl.leftOut[p.Target.Name]; ok {
			o.Excluded = why
		}
		if o.Err != nil && missing == nil {
			unhealthy = true
		}
		var refused *objects.RefusedError
		if errors.As(p.Err, &refused) {
			c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonObjectConflict, "Fan out", "%v", refused)
		}
		if p.AdoptErr != nil {
			log.Info("Tying copies to their candidate failed; will retry", "target", p.Target.Name, "error", p.AdoptErr.Error())
			unhealthy = true
		}
		observed = append(observed, o)
	}
	if newerAllowance(string(pod.UID), election, observed) {
		election = c.freshElection(ctx, pod, election)
	}
	if election.Elected() {
		observed = c.confirmRelease(ctx, pod, election, observed)
		if !slices.ContainsFunc(observed, func(o Observed) bool { return o.Target == election.Target }) {
			// Its target is not configured, but its object is there
			// (draining, or not started yet): look again.
			unhealthy = true
		}
	}
	in := Input{SourceUID: string(pod.UID), Election: election, Observed: observed, Now: time.Now()}
	in.Policy = c.judgement(pod, &pl, placed, observed)
	// unlock releases the workload's lock once the election is written:
	// siblings count it from then on (c.elections), so the allowance and
	// the rest need not hold them up.
	unlock := func() {}
	defer func() { unlock() }()
	locked := false
	// countLocked takes the workload's lock and counts the siblings again:
	// siblings elect one at a time, each counting the others' elections,
	// this agent's unacknowledged writes included.
	countLocked := func() error {
		key := workloadOf(pod)
		if locked || !pl.policy.Spreads() || key == "" {
			return nil
		}
		unlock, locked = c.locks.lock(pod.Namespace+"/"+key), true
		in.Policy.Placed, err = c.siblingDomains(ctx, pod, &pl)
		return err
	}
	if !election.Elected() && anyReserved(observed) {
		// A first election is the common one: judged under the lock from
		// the start, so that a burst of siblings waits its turn rather
		// than deciding on a count that is stale by then.
		if err := countLocked(); err != nil {
			endCount(false)
			return reconcile.Result{}, err
		}
	}
	d := decide(in)
	if d.Elects() && !locked && pl.policy.Spreads() && workloadOf(pod) != "" {
		// Any other election (the elected reservation ended, or its
		// target reserved anew) is decided again on the count made under
		// the lock.
		if err := countLocked(); err != nil {
			endCount(false)
			return reconcile.Result{}, err
		}
		d = decide(in)
	}
	observed = d.Observed
	if d.Wait > 0 {
		endCount(pl.narrowedBySpread())
		return reconcile.Result{RequeueAfter: d.Wait}, nil
	}
	if pl.policy != nil && !election.Elected() && excludedReservation(observed) {
		// Siblings moving may allow it: look again when one does, or
		// after a while for a pod of no workload.
		if waitKey == "" {
			unhealthy = true
		}
		lookAgain = endCount(true)
	}
	if endCount(pl.narrowedBySpread()) {
		lookAgain = true
	}
	for _, v := range d.Violations {
		log.Error(errors.New("candidate bound without election"), "Protocol violation", "target", v, "election", election.Encode())
		c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "ProtocolViolation", "Elect", "Target %s bound a candidate it was not allowed to bind; it will be deleted", v)
	}
	err = applyElection(ctx, c, pod, d, func() {
		unlock()
		unlock = func() {}
		c.wakeSiblings(pod)
	})
	if apierrors.IsConflict(err) && d.Elect != nil {
		// The decision was made on a stale copy of the pod (often our own
		// previous write not yet in the cache). The newer version
		// triggers another reconcile; nothing was allowed.
		log.V(4).Info("Election lost a race with a newer pod version", "election", d.Elect.Encode())
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case d.Elects():
		// No Event: one write per pod less in the source; the Scheduled
		// event names the winner.
		log.V(2).Info("Elected", "target", d.Elect.Target, "node", nodeOf(observed, d.Elect.Target), "election", d.Elect.Generation)
	case d.Elect != nil:
		c.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, "ElectionWithdrawn", "Elect", "The elected candidate in target %s was unreserved; election %d is open again", election.Target, d.Elect.Generation)
	}
	if d.Bound != "" {
		return c.bind(ctx, pod, d.Bound, nodeOf(observed, d.Bound), election.Generation, candidatesIn(observed), targets)
	}
	if d.Elect == nil && d.Allow == nil && missing == nil && !election.Elected() {
		if reasons := Reasons(observed); reasons != "" {
			if why := unschedulableMessage(reasons, uninvitedReasons(pod, uninvited), len(targets)); c.setUnschedulable(ctx, pod, why) {
				c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "NoTargetAvailable", "Elect", "No target can run this pod: %s", reasons)
			}
		}
	}
	// wake is when to look again (0: on the next change only).
	var wake time.Duration
	if d.Elect == nil && election.Elected() {
		wake = c.revokeIfStalled(ctx, pod, election, placements)
	}
	now := election
	if d.Elect != nil {
		now = *d.Elect
	}
	wake = soonest(wake, c.applyDenials(ctx, pod, now, observed))
	if pl.policy.Spreads() {
		wake = soonest(wake, c.repin(ctx, pod, pl.stalePins(placements, now.Target)))
	}
	if lookAgain {
		// A sibling moved while this pod counted: count again now.
		return reconcile.Result{Requeue: true}, nil
	}
	if unhealthy {
		wake = soonest(wake, retryUnhealthy)
	}
	if waiting {
		// A sibling that moves wakes it at once; should none move (every
		// sibling waiting on the others, a candidate gone unnoticed), it
		// is looked at again all the same: no pod waits for ever unseen.
		wake = soonest(wake, narrowedRecheck)
	}
	return reconcile.Result{RequeueAfter: wake}, nil
}

// soonest is the earlier of two waits, where 0 is none.
func soonest(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// applyDenials denies the candidates that cannot be elected now and lifts
// the denials of those that may be again (see Denials). Lifting is written
// at once: a pod may wait for it. Denying waits until the election has
// stood for DenyAfter with the same candidates to deny, so that the short
// waits of a burst (an election bound a moment later) cost no write; it
// returns how long until then.
func (c *Controller) applyDenials(ctx context.Context, pod *corev1.Pod, election protocol.Election, observed []Observed) time.Duration {
	deny, lift := Denials(string(pod.UID), election, observed)
	if c.DenyAfter <= 0 {
		deny = nil
	}
	write := func(target string, value *string) {
		t, ok := c.Targets.Get(target)
		if !ok {
			return
		}
		name := candidate.CandidateNameOf(pod, c.SourceCluster, t.Name)
		if err := t.AnnotateAgain(ctx, t.NamespaceFor(pod.Namespace), name, map[string]*string{protocol.DeniedAnnotation: value}); err != nil {
			logr.FromContextOrDiscard(ctx).Info("Writing a denial failed; will retry", "target", target, "deny", value != nil, "error", err.Error())
		}
	}
	for _, target := range lift {
		write(target, nil)
	}
	if len(deny) == 0 {
		c.denySince.forget(pod.UID)
		return 0
	}
	since := c.denySince.since(pod.UID, election.Encode()+" "+strings.Join(deny, ","))
	if wait := c.DenyAfter - time.Since(since); wait > 0 {
		return wait
	}
	value := protocol.Denial{SourceUID: string(pod.UID), Generation: election.Generation}.Encode()
	for _, target := range deny {
		write(target, &value)
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("Denied candidates that cannot be elected now", "targets", deny, "election", election.Encode())
	return 0
}

// steadyClock remembers, per pod UID, since when a state named by a key
// has held as this process saw it; forgotten on restart, when the wait
// starts again.
type steadyClock struct{ m sync.Map }

type steadySince struct {
	key string
	at  time.Time
}

// since is when uid was first seen in state key, now if it was in another.
func (s *steadyClock) since(uid types.UID, key string) time.Time {
	v, loaded := s.m.LoadOrStore(uid, steadySince{key, time.Now()})
	held := v.(steadySince)
	if loaded && held.key != key {
		held = steadySince{key, time.Now()}
		s.m.Store(uid, held)
	}
	return held.at
}

func (s *steadyClock) forget(uid types.UID) { s.m.Delete(uid) }

// sweep forgets the pods first seen in their state more than maxAge ago.
func (s *steadyClock) sweep(now time.Time, maxAge time.Duration) {
	s.m.Range(func(k, v any) bool {
		if now.Sub(v.(steadySince).at) > maxAge {
			s.m.Delete(k)
		}
		return true
	})
}

// wakeSiblings records that a pod's place among its workload's changed
// (elected, withdrawn, deleted) and sends the siblings the spread narrowed
// to the queue.
func (c *Controller) wakeSiblings(pod *corev1.Pod) {
	key := workloadOf(pod)
	if key == "" {
		return
	}
	pods := c.waiters.changed(pod.Namespace + "/" + key)
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

// reportUninvited tells the pod's owner, once, that no target may take it
// because no invitation covers its namespace: PodScheduled=False with
// reason Unschedulable, as kube-scheduler says a pod no node can run, and a
// NotInvited Event.
func (c *Controller) reportUninvited(ctx context.Context, pod *corev1.Pod, uninvited []*target.Target, all int) {
	parts := uninvitedReasons(pod, uninvited)
	if c.setUnschedulable(ctx, pod, unschedulableMessage("", parts, all)) {
		c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonNotInvited, "Fan out", "Skipped: %s", strings.Join(parts, "; "))
	}
}

// uninvitedReasons says, for each target whose invitation does not cover
// the pod's namespace, so.
func uninvitedReasons(pod *corev1.Pod, uninvited []*target.Target) []string {
	var parts []string
	for _, t := range uninvited {
		parts = append(parts, fmt.Sprintf("target %s does not invite this cluster into namespace %s", t.Name, t.NamespaceFor(pod.Namespace)))
	}
	return parts
}

// unschedulableMessage is the message of a source pod's PodScheduled=False
// condition, worded as kube-scheduler words a pod no node can run ("0/3
// nodes are available: ..."): each target's reason (Reasons, "t1: ...;
// t2: ...") and the targets whose invitation does not cover the pod's
// namespace.
func unschedulableMessage(reasons string, uninvited []string, targets int) string {
	parts := slices.Clone(uninvited)
	if reasons != "" {
		parts = append([]string{reasons}, parts...)
	}
	return fmt.Sprintf("0/%d targets can run the pod: %s", targets, strings.Join(parts, "; "))
}

// skewCounts matches the numbers of a spread's exclusion (placement's
// "zone=a would have 3 pods against 1 in b (maxSkew 1)").
var skewCounts = regexp.MustCompile(`would have \d+ pods against \d+ in (\S+) \(maxSkew (\d+)\)`)

// steadyMessage is msg without the sibling counts of spread exclusions,
// which change with every sibling placed: the condition is written when
// its message changes, and each write brings the pod back to the queue,
// so a message with counts would be written again and again while a
// burst is placed. kube-scheduler's own message has no counts either; the
// Events keep them.
func steadyMessage(msg string) string {
	return skewCounts.ReplaceAllString(msg, "would exceed maxSkew $2 against $1")
}

// setUnschedulable sets the pod's PodScheduled=False condition with reason
// Unschedulable (which autoscalers, kubectl and alerting read) and msg,
// unless it says so already. It reports whether it wrote it.
func (c *Controller) setUnschedulable(ctx context.Context, pod *corev1.Pod, msg string) bool {
	msg = steadyMessage(msg)
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable && cond.Message == msg {
			return false
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg,
		LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return false
	}
	if _, err := c.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		logr.FromContextOrDiscard(ctx).Info("Reporting that no target can run the pod failed", "error", err.Error())
		return false
	}
	return true
}

// reportUnscheduled tells the pod's owner, once per message, why it is not
// placed: a PodScheduled=False condition (replaced when the pod is bound)
// and a Warning Event.
func (c *Controller) reportUnscheduled(ctx context.Context, pod *corev1.Pod, reason, action, msg string) {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Reason == reason && cond.Message == msg {
			return
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: msg,
		LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return
	}
	if _, err := c.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		logr.FromContextOrDiscard(ctx).Info("Reporting why the pod is not placed failed", "reason", reason, "error", err.Error())
		return
	}
	c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, reason, action, "%s", msg)
}

// gone cleans up after a source pod that the cache no longer has: every
// candidate of it goes. Deleting is not undone, so the API server is asked
// first: a cache can be stale (a leader that was paused, a watch that
// lagged), and a pod of that name that lives keeps its candidates.
func (c *Controller) gone(ctx context.Context, req reconcile.Request, targets []*target.Target) (reconcile.Result, error) {
	live, err := c.Kube.CoreV1().Pods(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.sweep()
		return c.deleteCandidates(ctx, req.Namespace, req.Name, nothing, targets)
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("confirming that %s is gone: %w", req.NamespacedName, err)
	case !isSourcePod(live):
		return c.deleteCandidates(ctx, req.Namespace, req.Name, nothing, targets)
	}
	// The cache is behind: the pod's own events bring it back; until then
	// only the candidates of other pods of that name go.
	logr.FromContextOrDiscard(ctx).V(2).Info("The cache misses a source pod that exists; keeping its candidates", "uid", live.UID)
	if err := candidate.CleanUp(ctx, req.Namespace, req.Name, targets, ofPod(live.UID)); err != nil {
		return reconcile.Result{RequeueAfter: retryUnhealthy}, nil
	}
	return reconcile.Result{RequeueAfter: time.Second}, nil
}

// reportFanOut tells the pod's owner which targets were sent a candidate by
// this reconcile, when that says more than the first draw: some were left
// out for a reason (the policy, a target that cannot run the pod), or the
// set widened because every target that held a candidate failed it. The
// first candidates of a pod, drawn among targets that may all run it, are
// named by its Scheduled Event instead: an Event is a write in the source,
// and this one would come with every pod.
func (c *Controller) reportFanOut(pod *corev1.Pod, placements []candidate.Placement, pl *plan) {
	var sent []string
	widened := false
	for _, p := range placements {
		switch {
		case p.Created:
			sent = append(sent, p.Target.Name)
		case p.Candidate != nil:
			widened = true
		}
	}
	why := pl.exclusions()
	if len(sent) == 0 || (!widened && why == "") {
		return
	}
	msg := fmt.Sprintf("Sent a candidate to %d of %d targets: %s", len(sent), len(placements), strings.Join(sent, ", "))
	if why != "" {
		msg += "; " + why
	}
	c.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, ReasonFannedOut, "Fan out", "%s", msg)
}

// ReasonPolicyUnsatisfiable is the reason of the Event of a pod its
// PlacementPolicy, or its required node affinity as the targets' summaries
// tell, or targets held back, let go to no target now; its PodScheduled
// condition is Unschedulable.
const ReasonPolicyUnsatisfiable = "PolicyUnsatisfiable"

// ReasonPolicyNotApplied is the reason of the Event of a pod that a
// PlacementPolicy meant to govern but does not (a conflict, a missing
// policy): it is placed as if no policy selected it.
const ReasonPolicyNotApplied = "PolicyNotApplied"

// reportProblem tells the pod's owner, once, why a policy does not govern it.
func (c *Controller) reportProblem(pod *corev1.Pod, problem string) {
	if prev, ok := c.problems.Swap(pod.UID, reported{problem, time.Now()}); ok && prev.(reported).msg == problem {
		return
	}
	c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonPolicyNotApplied, "Fan out", "%s; placed as if no policy selected it", problem)
}

// forget drops what this process remembers of a placed pod.
func (c *Controller) forget(uid types.UID) {
	c.firstReserved.Delete(uid)
	c.problems.Delete(uid)
	c.electedSince.forget(uid)
	c.denySince.forget(uid)
	c.repinSince.forget(uid)
}

// freshElection reads the election record from the source's API server,
// when a bound candidate carries an allowance of a later election than the
// cached record: only the current election's candidate is adopted, and a
// cache can lag behind the write that allowed it. It returns the record
// read if it is later than the cached one.
func (c *Controller) freshElection(ctx context.Context, pod *corev1.Pod, cached protocol.Election) protocol.Election {
	live, err := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || live.UID != pod.UID {
		return cached
	}
	e, err := protocol.ParseElection(live.Annotations[protocol.ElectionAnnotation])
	if err != nil || e.Generation <= cached.Generation {
		return cached
	}
	return e
}

// confirmRelease reads the elected candidate from its target's API server
// when the cache says the candidate can no longer bind on the election
// (gone, or a new one in its place): only a live read may release an
// election, since the cache can lag behind the one that saw the
// reservation. The live view replaces the cached one in observed.
//
// A target that is not configured any more is released once its object is
// gone: deleting it drained it (its candidates that did not run a pod were
// deleted), or its finalizer was removed by hand, which leaves what it holds
// to its operator (docs/invitations.md). While the object is there (being
// drained, or the agent starting) the election waits.
func (c *Controller) confirmRelease(ctx context.Context, pod *corev1.Pod, election protocol.Election, observed []Observed) []Observed {
	i := slices.IndexFunc(observed, func(o Observed) bool { return o.Target == election.Target })
	if i < 0 {
		if c.targetGone(ctx, election.Target) {
			observed = append(observed, Observed{Target: election.Target, Live: true})
		}
		return observed
	}
	if observed[i].Live || !releasedIfLive(observed[i], election) {
		return observed
	}
	t, ok := c.Targets.Get(election.Target)
	if !ok {
		return observed
	}
	live, err := t.Live(ctx, t.NamespaceFor(pod.Namespace), candidate.CandidateNameOf(pod, c.SourceCluster, t.Name))
	if live != nil && types.UID(live.Labels[protocol.SourceUIDLabel]) != pod.UID {
		live = nil // another pod's of that name
	}
	o := observe(candidate.Placement{Target: t, Candidate: live, Err: err})
	o.Live = err == nil
	o.Bonus, o.Excluded = observed[i].Bonus, observed[i].Excluded
	observed[i] = o
	return observed
}

// targetGone reports whether the Target ("namespace/name") or ClusterTarget
// ("name") of that name is gone.
func (c *Controller) targetGone(ctx context.Context, name string) bool {
	var obj client.Object = &v1alpha1.ClusterTarget{}
	key := client.ObjectKey{Name: name}
	if ns, n, namespaced := strings.Cut(name, "/"); namespaced {
		obj, key = &v1alpha1.Target{}, client.ObjectKey{Namespace: ns, Name: n}
	}
	return apierrors.IsNotFound(c.Client.Get(ctx, key, obj))
}

// revokeIfStalled revokes the elected candidate once the pod has waited
// ElectionTimeout on it, counted from when this process first saw the
// election: a target that answers but never binds (its scheduler gone, or
// a reservation no scheduler holds) would hold the pod for ever. The
// candidate is deleted only if it has not bound nor changed since the
// cache saw it (Target.Revoke); its absence then releases the election.
// It returns how long until the timeout, 0 when there is nothing to wait
// for.
func (c *Controller) revokeIfStalled(ctx context.Context, pod *corev1.Pod, election protocol.Election, placements []candidate.Placement) time.Duration {
	if c.ElectionTimeout <= 0 {
		return 0
	}
	i := slices.IndexFunc(placements, func(p candidate.Placement) bool { return p.Target.Name == election.Target })
	if i < 0 {
		return 0
	}
	p := placements[i]
	if p.Candidate == nil || p.Candidate.DeletionTimestamp != nil || p.Candidate.Spec.NodeName != "" {
		return 0
	}
	since := c.electedSince.since(pod.UID, election.Encode())
	if wait := c.ElectionTimeout - time.Since(since); wait > 0 {
		return wait
	}
	revoked, err := p.Target.Revoke(ctx, p.Candidate)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("Revoking a stalled election failed; will retry", "target", election.Target, "error", err.Error())
		return retryUnhealthy
	}
	if revoked {
		c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonElectionRevoked, "Elect",
			"Target %s did not bind the candidate elected %s ago (election %d); deleted it before it could bind, to elect another target",
			election.Target, c.ElectionTimeout, election.Generation)
	}
	// Its deletion, or the change that kept it, brings the pod back.
	return 0
}

// repinAfter is how long a candidate must have stood pinned to a domain
// the spread closed before it is deleted to be sent again, pinned where
// the spread now allows: in a burst the verdicts flip with every sibling
// elected, and a candidate deleted on every flip costs far more than one
// that waits a moment.
const repinAfter = 3 * time.Second

// repin deletes the stale candidates (plan.stalePins) once they have stood
// stale for repinAfter, so that the next reconcile sends them again,
// pinned to a domain still open; it returns how long until then.
func (c *Controller) repin(ctx context.Context, pod *corev1.Pod, stale []candidate.Placement) time.Duration {
	if len(stale) == 0 {
		c.repinSince.forget(pod.UID)
		return 0
	}
	names := make([]string, len(stale))
	for i, p := range stale {
		names[i] = p.Target.Name + "=" + strings.Join(candidate.PinnedDomain(p.Candidate), "/")
	}
	since := c.repinSince.since(pod.UID, strings.Join(names, ","))
	if wait := repinAfter - time.Since(since); wait > 0 {
		return wait
	}
	for _, p := range stale {
		if _, err := p.Target.Revoke(ctx, p.Candidate); err != nil {
			logr.FromContextOrDiscard(ctx).Info("Deleting a candidate pinned to a closed domain failed; will retry", "target", p.Target.Name, "error", err.Error())
			return retryUnhealthy
		}
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("Deleted candidates pinned to domains the spread closed, to pin them again", "candidates", names)
	// Their deletion brings the pod back.
	return 0
}

// ReasonElectionRevoked is the reason of the Event of a pod whose elected
// candidate its target did not bind within the election timeout, and
// which the source deleted to elect another target.
const ReasonElectionRevoked = "ElectionRevoked"

// sweep drops what this process remembers of pods that went before they
// were placed: their UIDs are no longer known, so old entries go.
func (c *Controller) sweep() {
	// The maps are keyed by UID: entries of pods deleted before they were
	// placed are swept when they grow old.
	now := time.Now()
	c.firstReserved.Range(func(k, v any) bool {
		if now.Sub(v.(time.Time)) > staleWindow {
			c.firstReserved.Delete(k)
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
}

type reported struct {
	msg string
	at  time.Time
}

func anyReserved(observed []Observed) bool {
	for _, o := range observed {
		if o.Exists && o.State.Phase == protocol.PhaseReserved {
			return true
		}
	}
	return false
}

func anyBound(observed []Observed) bool {
	for _, o := range observed {
		if o.Exists && o.State.Phase == protocol.PhaseBound {
			return true
		}
	}
	return false
}

func excludedReservation(observed []Observed) bool {
	for _, o := range observed {
		if o.Exists && o.State.Phase == protocol.PhaseReserved && o.Excluded != "" {
			return true
		}
	}
	return false
}

// ReasonFannedOut is the reason of the Event that says which targets were
// sent a candidate of a pod.
const ReasonFannedOut = "FannedOut"

// ReasonNotInvited is the reason of the PodScheduled condition and Event of
// a pod whose namespace a target's invitation does not cover.
const ReasonNotInvited = "NotInvited"

// ReasonObjectMissing is the reason of the PodScheduled condition and Event
// of a pod that references a ConfigMap or Secret the source does not hold.
const ReasonObjectMissing = "ObjectMissing"

// ReasonObjectConflict is the reason of the Event of a pod whose candidate
// a target did not get because it refused the copy of an object the pod
// references: mostly, an object of that name that is not this cluster's
// copy is in the way there.
const ReasonObjectConflict = "ObjectConflict"

// observe turns a placement into what the election looks at. A malformed
// state annotation is a peer's mistake: it counts as no report.
func observe(p candidate.Placement) Observed {
	o := Observed{Target: p.Target.Name, Err: p.Err}
	cand := p.Candidate
	if cand == nil {
		return o
	}
	o.Exists = cand.DeletionTimestamp == nil
	o.Allowed = cand.Annotations[protocol.AllowedAnnotation]
	o.Denied = cand.Annotations[protocol.DeniedAnnotation]
	if raw := cand.Annotations[protocol.StateAnnotation]; raw != "" {
		var s protocol.State
		if json.Unmarshal([]byte(raw), &s) == nil {
			o.State = s
		}
	}
	if cand.Spec.NodeName != "" {
		// The binding itself is the truth; the plugin's Bound report may
		// still be on its way (or missing, for a rogue binding).
		o.State.Phase = protocol.PhaseBound
	}
	o.Unschedulable = target.Unschedulable(cand)
	return o
}

// writeElection records the election on the source pod. The write carries
// the resourceVersion the decision was based on, so two agents (or one agent
// and a stale cache) can never both succeed. It is a PUT of pods/status of
// the cached pod with the annotation set: the API server takes the metadata
// and status of pods/status (not the spec, which the cache trims) and, at
// that resourceVersion, the cached pod is the stored one, so only the
// annotation changes. Sent as protobuf, it costs the source API server
// about half of what the merge patch it replaces did (a patch is applied to
// the pod converted to JSON and back).
func (c *Controller) writeElection(ctx context.Context, pod *corev1.Pod, e protocol.Election, domain map[string]string) error {
	update := *pod // shallow: the cached pod stays the object the decision saw
	update.Annotations = make(map[string]string, len(pod.Annotations)+2)
	maps.Copy(update.Annotations, pod.Annotations)
	update.Annotations[protocol.ElectionAnnotation] = e.Encode()
	// The domain of the elected reservation's node goes with it, so that
	// its siblings count it where it is.
	written := ""
	if e.Elected() && domain != nil {
		written = protocol.EncodeDomain(domain)
		update.Annotations[protocol.ElectedDomainAnnotation] = written
	} else {
		delete(update.Annotations, protocol.ElectedDomainAnnotation)
	}
	if _, err := c.Kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, &update, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("recording election %s on %s/%s: %w", e.Encode(), pod.Namespace, pod.Name, err)
	}
	c.elections.Store(pod.UID, writtenElection{value: e.Encode(), domain: written, at: time.Now()})
	if e.Elected() {
		electionSeconds.Observe(sinceCreation(pod))
	}
	return nil
}

// bind binds the source pod to the elected target's virtual node, then
// deletes the other candidates. The Scheduled event tells which target was
// elected and which of its nodes runs the pod.
func (c *Controller) bind(ctx context.Context, pod *corev1.Pod, targetName, targetNode string, generation int64, candidates []string, targets []*target.Target) (reconcile.Result, error) {
	node := target.NodeNameOf(targetName)
	if _, done := c.bound.Load(pod.UID); done {
		return c.cleanUp(ctx, pod, delegate(pod.UID, targetName), targets)
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	err := c.Kube.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	switch {
	case err == nil:
		podBoundSeconds.Observe(sinceCreation(pod))
		c.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Scheduled", "Bind", "Elected target %s (election %d) of the candidates in %s, whose node %s runs it; bound to virtual node %s",
			targetName, generation, strings.Join(candidates, ", "), targetNode, node)
	case apierrors.IsConflict(err):
		// Bound already: by an earlier reconcile whose result the cache
		// does not show yet (which reported it), or to another node. Only
		// the live pod tells: cleaning up as if bound here would delete the
		// delegate that runs it elsewhere.
		live, getErr := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case getErr != nil:
			return reconcile.Result{}, fmt.Errorf("binding %s/%s to %s: %w; reading it back: %w", pod.Namespace, pod.Name, node, err, getErr)
		case live.UID != pod.UID:
			return reconcile.Result{}, nil // another pod of that name: its own reconcile
		case live.Spec.NodeName != node:
			logr.FromContextOrDiscard(ctx).Error(err, "Source pod bound elsewhere than its elected target; keeping that binding", "node", live.Spec.NodeName, "elected", targetName)
			c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "ProtocolViolation", "Bind",
				"Target %s's candidate was bound, but the pod is bound to %s already; the candidate in %s will be deleted", targetName, live.Spec.NodeName, targetName)
			return reconcile.Result{Requeue: true}, nil // the bound pod's reconcile cleans up
		}
	default:
		return reconcile.Result{}, fmt.Errorf("binding %s/%s to %s: %w", pod.Namespace, pod.Name, node, err)
	}
	c.bound.Store(pod.UID, struct{}{})
	return c.cleanUp(ctx, pod, delegate(pod.UID, targetName), targets)
}

// keepFunc says which candidates a clean-up keeps, by target and source UID.
type keepFunc = func(t *target.Target, sourceUID types.UID) bool

func nothing(*target.Target, types.UID) bool { return false }

// delegate keeps the candidate of source pod uid in target elected.
func delegate(uid types.UID, elected string) keepFunc {
	return func(t *target.Target, sourceUID types.UID) bool { return t.Name == elected && sourceUID == uid }
}

// ofPod keeps every candidate of source pod uid.
func ofPod(uid types.UID) keepFunc {
	return func(_ *target.Target, sourceUID types.UID) bool { return sourceUID == uid }
}

// cleanUp deletes the candidates of the pod's name that keep does not
// keep, as the cached pod (deleted, or bound) calls for. Candidates of
// another pod of that name are deleted only if they are not the live
// pod's: a cache can be stale (a leader paused past its lease, a watch
// that lags) and hold a pod deleted since, whose name a new pod lives
// under, with candidates and maybe a delegate of its own.
func (c *Controller) cleanUp(ctx context.Context, pod *corev1.Pod, keep keepFunc, targets []*target.Target) (reconcile.Result, error) {
	live, err := c.liveOther(ctx, pod, targets)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("Cleaning up candidates failed; will retry", "error", err.Error())
		return reconcile.Result{RequeueAfter: retryUnhealthy}, nil
	}
	return c.deleteCandidates(ctx, pod.Namespace, pod.Name, func(t *target.Target, uid types.UID) bool {
		return keep(t, uid) || (live != "" && uid == live)
	}, targets)
}

// cleanUpOthers deletes the candidates of earlier pods of the pod's name
// (another source UID) that are not the live pod's: a pod deleted and
// created again under the same name (a StatefulSet's, or `kubectl replace
// --force`) while a target was unreachable, or before the old pod's
// candidates were cached, leaves them behind otherwise, holding nodes, and
// one already allowed could run unseen.
func (c *Controller) cleanUpOthers(ctx context.Context, pod *corev1.Pod, targets []*target.Target) error {
	live, err := c.liveOther(ctx, pod, targets)
	if err != nil {
		return err
	}
	return candidate.CleanUp(ctx, pod.Namespace, pod.Name, targets, func(_ *target.Target, uid types.UID) bool {
		return uid == pod.UID || (live != "" && uid == live)
	})
}

// liveOther is the UID of the pod that lives under the cached pod's name,
// when it is another pod than the cached one (the cache is stale), read
// from the API server; "" when it is the cached pod or there is none. It
// reads only when some target holds candidates of another pod of that
// name, the only ones whose deletion depends on it.
func (c *Controller) liveOther(ctx context.Context, pod *corev1.Pod, targets []*target.Target) (types.UID, error) {
	if !candidate.OtherUIDs(pod.Namespace, pod.Name, pod.UID, targets) {
		return "", nil
	}
	live, err := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading %s/%s before deleting candidates of other pods of its name: %w", pod.Namespace, pod.Name, err)
	case live.UID == pod.UID:
		return "", nil
	}
	logr.FromContextOrDiscard(ctx).Info("The cache holds an earlier pod of a name another pod lives under; keeping the live pod's candidates", "cached", pod.UID, "live", live.UID)
	return live.UID, nil
}

// deleteCandidates deletes the candidates of namespace/name that keep does
// not keep, as they are: the caller has read the live pod if it matters.
func (c *Controller) deleteCandidates(ctx context.Context, namespace, name string, keep keepFunc, targets []*target.Target) (reconcile.Result, error) {
	if err := candidate.CleanUp(ctx, namespace, name, targets, keep); err != nil {
		logr.FromContextOrDiscard(ctx).Info("Cleaning up candidates failed; will retry", "error", err.Error())
		return reconcile.Result{RequeueAfter: retryUnhealthy}, nil
	}
	return reconcile.Result{}, nil
}

// candidatesIn names the targets that hold a candidate of the pod.
func candidatesIn(observed []Observed) []string {
	var names []string
	for _, o := range observed {
		if o.Exists {
			names = append(names, o.Target)
		}
	}
	slices.Sort(names)
	return names
}

func nodeOf(observed []Observed, target string) string {
	if o, ok := find(observed, target); ok {
		return o.State.Node
	}
	return ""
}
