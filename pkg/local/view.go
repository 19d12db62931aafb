package local

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/summary"
)

// The view lists and watches every node and every pod of the cluster that
// has not ended, the source pods aside.
// +kubebuilder:rbac:groups="",resources=nodes;pods,verbs=get;list;watch

// activePods are the pods that hold or will hold room on a node of this
// cluster: not ended, and not source pods (those run elsewhere, on a
// virtual node). A pod that ends leaves the watch as a deletion.
const activePods = "spec.schedulerName!=" + protocol.SourceSchedulerName +
	",status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed)

// DefaultUnfitMemory is how long the pods of a controller are not kept
// here after one of its pods kept here was deleted while its scheduler
// found no node for it (evicted by Overflow, or deleted by its
// controller): the view's room check missed what kept it out (pod
// affinity, topology spread, host ports, volumes, resources it does not
// count), and would miss it again for the replacement.
const DefaultUnfitMemory = 5 * time.Minute

// DefaultClaimTTL is how long a claim stands for a pod admitted here that
// the view has not seen created: enough for the create to reach the watch,
// short enough that a create refused after admission frees its room soon.
const DefaultClaimTTL = 30 * time.Second

// View is this cluster's room as the webhook needs it: every node, what the
// pods bound to each take of it, what the pods not bound yet ask, and the
// claims of the pods it admitted whose creation it has not seen yet. Its
// informers start the first time Want is called (the cluster has a self
// target with localFirst, or placement weighs a self target: Weigh), so
// that a cluster that never keeps a pod nor targets itself does not watch
// every pod. It runs on every replica of the agent, as the
// webhook does.
type View struct {
	nodes, pods cache.SharedIndexInformer
	// handled report whether the handlers have been given every node and
	// pod the informers listed (the view counts them there).
	handled     []cache.InformerSynced
	claimTTL    time.Duration
	unfitMemory time.Duration
	clock       clock.Clock

	want      chan struct{}
	wantOnce  sync.Once
	synced    chan struct{}
	closeOnce sync.Once

	mu sync.Mutex
	// rooms are the nodes that take pods (takesPods), by name; free is
	// what they have free in all, what their bound pods leave, kept as
	// nodes and pods change so that Free costs nothing a call.
	rooms map[string]room
	free  summary.Amounts
	// used is what the bound pods take of each node, by node name.
	used map[string]summary.Amounts
	// pending is what the pods not bound yet ask, but those their
	// scheduler found no node for and the candidates (pendingCandidates).
	pending summary.Amounts
	// pendingCandidates is what the candidates not bound yet ask (of this
	// cluster's sources, or of others that it invites).
	pendingCandidates summary.Amounts
	// claims are pods admitted here that the view has not seen yet, oldest
	// first.
	claims []claim
	// stuck are the pods kept here that their scheduler found no node for,
	// by namespace/name.
	stuck map[string]*keptPod
	// unfit counts the pods in stuck of each controller, by its UID;
	// unfitUntil is until when the pods of a controller are not kept, by
	// its UID, after one of its stuck pods was deleted.
	unfit      map[types.UID]int
	unfitUntil map[types.UID]time.Time
}

// room is a node that takes pods, with what it offers.
type room struct {
	node        *corev1.Node
	allocatable summary.Amounts
}

// podState is what the view keeps of a pod: its usage and, of a pod kept
// here (protocol.LocalLabel), what Overflow needs.
type podState struct {
	*summary.PodUsage
	kept *keptPod
	// candidate is set for a candidate pod (protocol.CandidateLabel).
	candidate bool
}

// keptPod is a pod kept here, its controller and, while its scheduler
// finds no node for it, since when.
type keptPod struct {
	namespace, name string
	uid             types.UID
	// resourceVersion is the version the view holds: an eviction made on
	// what the view says holds only while the pod has not changed since.
	resourceVersion string
	// owner is its controller; zero for a pod that has none.
	owner metav1.OwnerReference
	// stuckSince is when its scheduler last said it found no node for it
	// (its PodScheduled condition's transition); zero while it did not.
	stuckSince time.Time
}

// trimPod keeps of a pod its usage and, of a pod kept here, its keptPod.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	u, _ := summary.TrimPod(pod)
	s := &podState{PodUsage: u.(*summary.PodUsage), candidate: pod.Labels[protocol.CandidateLabel] == "true"}
	if pod.Labels[protocol.LocalLabel] == "true" {
		s.kept = &keptPod{namespace: s.Namespace(), name: pod.Name, uid: pod.UID, resourceVersion: pod.ResourceVersion}
		if owner := metav1.GetControllerOfNoCopy(pod); owner != nil {
			s.kept.owner = metav1.OwnerReference{APIVersion: owner.APIVersion, Kind: owner.Kind, Name: owner.Name, UID: owner.UID}
		}
		if s.Unschedulable() {
			s.kept.stuckSince = time.Now()
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled && !c.LastTransitionTime.IsZero() {
					s.kept.stuckSince = c.LastTransitionTime.Time
				}
			}
		}
	}
	return s, nil
}

type claim struct {
	namespace string
	requests  summary.Amounts
	until     time.Time
}

var (
	_ manager.Runnable               = &View{}
	_ manager.LeaderElectionRunnable = &View{}
)

// NewView prepares a view of the cluster kube talks to; Start runs it.
func NewView(kube kubernetes.Interface) *View {
	v := newView(clock.RealClock{})
	v.nodes = coreinformers.NewNodeInformer(kube, 0, cache.Indexers{})
	v.pods = coreinformers.NewFilteredPodInformer(kube, metav1.NamespaceAll, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = activePods })
	// Neither informer has started: setting a transform cannot fail.
	_ = v.nodes.SetTransform(summary.TrimNode)
	_ = v.pods.SetTransform(trimPod)
	// Neither informer has started: adding a handler cannot fail.
	nodesHandled, _ := v.nodes.AddEventHandler(changes(v.nodeChanged))
	podsHandled, _ := v.pods.AddEventHandler(changes(v.podChanged))
	v.handled = []cache.InformerSynced{nodesHandled.HasSynced, podsHandled.HasSynced}
	return v
}

// changes hands every add, update and deletion to changed as the old
// object and the new one, nil for none; a deletion the informer missed
// gives the last object it had.
func changes(changed func(oldObj, newObj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { changed(nil, obj) },
		UpdateFunc: changed,
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			changed(obj, nil)
		},
	}
}

func newView(clk clock.Clock) *View {
	return &View{
		claimTTL:    DefaultClaimTTL,
		unfitMemory: DefaultUnfitMemory,
		clock:       clk,
		want:        make(chan struct{}),
		synced:      make(chan struct{}),
		rooms:       map[string]room{},
		used:        map[string]summary.Amounts{},
		stuck:       map[string]*keptPod{},
		unfit:       map[types.UID]int{},
		unfitUntil:  map[types.UID]time.Time{},
	}
}

// NeedLeaderElection is false: every replica serves the webhook.
func (v *View) NeedLeaderElection() bool { return false }

// Want asks for the view: its informers start if they have not.
func (v *View) Want() { v.wantOnce.Do(func() { close(v.want) }) }

// Wanted reports whether Want was called.
func (v *View) Wanted() bool { return closed(v.want) }

// Synced reports whether the view has listed the nodes and pods.
func (v *View) Synced() bool { return closed(v.synced) }

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Start waits for Want, then watches nodes and pods until ctx ends.
func (v *View) Start(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-v.want:
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { v.nodes.RunWithContext(ctx) })
	wg.Go(func() { v.pods.RunWithContext(ctx) })
	if cache.WaitForNamedCacheSyncWithContext(ctx, v.handled...) {
		v.closeOnce.Do(func() { close(v.synced) })
	}
	<-ctx.Done()
	return nil
}

// podChanged moves a pod's requests from where the old version counted them
// to where the new one does (nil: none). A pod seen for the first time ends
// the oldest claim of its namespace that asked the same: that claim was,
// most likely, this pod's admission. A pod kept here deleted while stuck
// keeps its controller's pods from being kept for unfitMemory.
func (v *View) podChanged(oldObj, newObj any) {
	o, _ := oldObj.(*podState)
	n, _ := newObj.(*podState)
	v.mu.Lock()
	defer v.mu.Unlock()
	if o != nil {
		v.count(o, false)
		if n == nil && o.stuck() && o.kept.owner.UID != "" {
			v.unfitUntil[o.kept.owner.UID] = v.clock.Now().Add(v.unfitMemory)
		}
	}
	if n != nil {
		v.count(n, true)
		if o == nil {
			v.endClaim(n.Namespace(), n.Requested())
		}
	}
}

// nodeChanged counts a node's room in rooms and free while it takes pods.
func (v *View) nodeChanged(oldObj, newObj any) {
	o, _ := oldObj.(*corev1.Node)
	n, _ := newObj.(*corev1.Node)
	v.mu.Lock()
	defer v.mu.Unlock()
	if o != nil {
		if r, ok := v.rooms[o.Name]; ok {
			v.free = v.free.Less(r.allocatable.Less(v.used[o.Name]))
			delete(v.rooms, o.Name)
		}
	}
	if n != nil && takesPods(n) {
		r := room{node: n, allocatable: summary.AllocatableOf(n)}
		v.rooms[n.Name] = r
		v.free = v.free.Plus(r.allocatable.Less(v.used[n.Name]))
	}
}

// stuck reports whether s is a pod kept here that its scheduler found no
// node for.
func (s *podState) stuck() bool { return s.kept != nil && s.Unschedulable() }

// count adds (or takes away) what a pod holds. A pod not bound that its
// scheduler found no node for holds nothing: it may wait for ever (a
// selector no node matches), and would take room from every pod after it.
// Such a pod kept here is counted in stuck instead.
func (v *View) count(s *podState, add bool) {
	if s.stuck() {
		v.countStuck(s.kept, add)
	}
	u := s.PodUsage
	if u.Ended() || u.Unschedulable() {
		return
	}
	node := u.Node()
	pending := &v.pending
	if s.candidate {
		pending = &v.pendingCandidates
	}
	switch {
	case node == "" && add:
		*pending = pending.Plus(u.Requested())
	case node == "":
		*pending = pending.Less(u.Requested())
	default:
		v.use(node, u.Requested(), add)
	}
}

// use adds (or takes away) what a pod bound to node takes of it, in used
// and, when the node takes pods, in free.
func (v *View) use(node string, requests summary.Amounts, add bool) {
	r, counted := v.rooms[node]
	if counted {
		v.free = v.free.Less(r.allocatable.Less(v.used[node]))
	}
	left := v.used[node].Less(requests)
	if add {
		left = v.used[node].Plus(requests)
	}
	if left == (summary.Amounts{}) {
		delete(v.used, node)
	} else {
		v.used[node] = left
	}
	if counted {
		v.free = v.free.Plus(r.allocatable.Less(left))
	}
}

func (v *View) countStuck(k *keptPod, add bool) {
	key := k.namespace + "/" + k.name
	owner := k.owner.UID
	if add {
		v.stuck[key] = k
		if owner != "" {
			v.unfit[owner]++
		}
		return
	}
	delete(v.stuck, key)
	if owner != "" {
		if v.unfit[owner] <= 1 {
			delete(v.unfit, owner)
		} else {
			v.unfit[owner]--
		}
	}
}

// Free is what this cluster's nodes have free for one more pod in all: on
// every node that takes pods (Ready, not cordoned, not virtual), what its
// bound pods leave, less what the pods not bound yet ask and the claims,
// but the candidates not bound; ok is false until the view has listed the
// cluster. It weighs a self target against the others as a ClusterSummary
// weighs a target, which counts bound pods only: the candidates that wait
// here (a gang's, waiting for the rest of it, or denied while another
// goes first) would otherwise make the room they wait for look taken,
// and a gang their own candidates fill look as if it did not fit.
func (v *View) Free() (free corev1.ResourceList, ok bool) {
	if !v.Synced() {
		return nil, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.free.Less(v.claimedLocked(v.clock.Now()).Less(v.pendingCandidates)).List(), true
}

// Weigh is Free for placement weighing a self target: it asks for the
// view first (Want), so that a cluster that targets itself, with
// localFirst or not, has its room known once the view has listed it (ok
// is false until then). A self target's room left unknown counted as
// room enough: a gang that could not be completed held its turn for as
// long as a gang still gathering.
func (v *View) Weigh() (free corev1.ResourceList, ok bool) {
	v.Want()
	return v.Free()
}

// roomsLocked yields every node that takes pods with what its bound pods
// leave free. v.mu is held while it runs.
func (v *View) roomsLocked() iter.Seq[Node] {
	return func(yield func(Node) bool) {
		for name, r := range v.rooms {
			if !yield(Node{Node: r.node, Free: r.allocatable.Less(v.used[name])}) {
				return
			}
		}
	}
}

// claimedLocked is what the pods not bound yet ask (the candidates too:
// one waiting in Permit holds its node) and the claims standing at now
// hold; it forgets the claims that lapsed. v.mu is held.
func (v *View) claimedLocked(now time.Time) summary.Amounts {
	kept := v.claims[:0]
	claimed := v.pending.Plus(v.pendingCandidates)
	for _, c := range v.claims {
		if now.Before(c.until) {
			kept = append(kept, c)
			claimed = claimed.Plus(c.requests)
		}
	}
	v.claims = kept
	return claimed
}

// stuckBefore lists the pods kept here that their scheduler has found no node
// for since before cutoff.
func (v *View) stuckBefore(cutoff time.Time) []keptPod {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []keptPod
	for _, k := range v.stuck {
		if k.stuckSince.Before(cutoff) {
			out = append(out, *k)
		}
	}
	return out
}

// unfitOwner says why the pods of pod's controller are not kept here, or
// "" when they may be: another of them kept here waits with no node for
// it, or one was deleted so lately.
func (v *View) unfitOwner(pod *corev1.Pod, now time.Time) string {
	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil {
		return ""
	}
	if v.unfit[owner.UID] > 0 {
		return fmt.Sprintf("another pod of its %s %s kept here waits with no node for it", owner.Kind, owner.Name)
	}
	for uid, until := range v.unfitUntil {
		if !now.Before(until) {
			delete(v.unfitUntil, uid)
		}
	}
	if _, ok := v.unfitUntil[owner.UID]; ok {
		return fmt.Sprintf("a pod of its %s %s kept here was deleted lately while no node had room for it", owner.Kind, owner.Name)
	}
	return ""
}

func (v *View) endClaim(namespace string, requests summary.Amounts) {
	for i, c := range v.claims {
		if c.namespace == namespace && c.requests == requests {
			v.claims = append(v.claims[:i], v.claims[i+1:]...)
			return
		}
	}
}

// Claim decides whether pod has room here and, when it has and
// hold is true, sets its requests aside until the view sees the pod.
func (v *View) Claim(pod *corev1.Pod, hold bool) Verdict {
	if !v.Synced() {
		return Verdict{Reason: "the agent has not listed this cluster's nodes and pods yet"}
	}
	requests := summary.RequestsOf(pod)
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.clock.Now()
	claimed := v.claimedLocked(now)
	if why := v.unfitOwner(pod, now); why != "" {
		return Verdict{Reason: why}
	}
	if !v.free.Less(claimed).Covers(requests) {
		// No subset of the nodes has more: the verdict Fits would give,
		// without a look at each node.
		return Verdict{Reason: fmt.Sprintf("the nodes here have %v free in all, and pods admitted and not bound yet claim %v of it", v.free, claimed)}
	}
	verdict := Fits(pod, requests, v.roomsLocked(), claimed)
	if verdict.Fits && hold {
		v.claims = append(v.claims, claim{namespace: pod.Namespace, requests: requests, until: now.Add(v.claimTTL)})
	}
	return verdict
}
