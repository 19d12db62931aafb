package local

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// DefaultClaimTTL is how long a claim stands for a pod admitted here that
// the view has not seen created: enough for the create to reach the watch,
// short enough that a create refused after admission frees its room soon.
const DefaultClaimTTL = 30 * time.Second

// View is this cluster's room as the webhook needs it: every node, what the
// pods bound to each take of it, what the pods not bound yet ask, and the
// claims of the pods it admitted whose creation it has not seen yet. Its
// informers start the first time Want is called (the cluster has a self
// target with localFirst), so that a cluster that never keeps a pod does
// not watch every pod. It runs on every replica of the agent, as the
// webhook does.
type View struct {
	nodes, pods cache.SharedIndexInformer
	nodeStore   cache.Store
	claimTTL    time.Duration
	clock       clock.Clock

	want      chan struct{}
	wantOnce  sync.Once
	synced    chan struct{}
	closeOnce sync.Once

	mu sync.Mutex
	// used is what the bound pods take of each node, by node name.
	used map[string]summary.Amounts
	// pending is what the pods not bound yet ask, but those their
	// scheduler found no node for.
	pending summary.Amounts
	// claims are pods admitted here that the view has not seen yet, oldest
	// first.
	claims []claim
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
	_ = v.pods.SetTransform(summary.TrimPod)
	v.nodeStore = v.nodes.GetStore()
	_, _ = v.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { v.podChanged(nil, obj) },
		UpdateFunc: v.podChanged,
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			v.podChanged(obj, nil)
		},
	})
	return v
}

func newView(clk clock.Clock) *View {
	return &View{
		claimTTL: DefaultClaimTTL,
		clock:    clk,
		want:     make(chan struct{}),
		synced:   make(chan struct{}),
		used:     map[string]summary.Amounts{},
	}
}

// NeedLeaderElection is false: every replica serves the webhook.
func (v *View) NeedLeaderElection() bool { return false }

// Want asks for the view: its informers start if they have not.
func (v *View) Want() { v.wantOnce.Do(func() { close(v.want) }) }

// Synced reports whether the view has listed the nodes and pods.
func (v *View) Synced() bool {
	select {
	case <-v.synced:
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
	if cache.WaitForNamedCacheSyncWithContext(ctx, v.nodes.HasSynced, v.pods.HasSynced) {
		v.closeOnce.Do(func() { close(v.synced) })
	}
	<-ctx.Done()
	return nil
}

// podChanged moves a pod's requests from where the old version counted them
// to where the new one does (nil: none). A pod seen for the first time ends
// the oldest claim of its namespace that asked the same: that claim was,
// most likely, this pod's admission.
func (v *View) podChanged(oldObj, newObj any) {
	o, _ := oldObj.(*summary.PodUsage)
	n, _ := newObj.(*summary.PodUsage)
	v.mu.Lock()
	defer v.mu.Unlock()
	if o != nil {
		v.count(o, false)
	}
	if n != nil {
		v.count(n, true)
		if o == nil {
			v.endClaim(n.Namespace(), n.Requested())
		}
	}
}

// count adds (or takes away) what a pod holds. A pod not bound that its
// scheduler found no node for holds nothing: it may wait for ever (a
// selector no node matches), and would take room from every pod after it.
func (v *View) count(u *summary.PodUsage, add bool) {
	if u.Ended() || u.Unschedulable() {
		return
	}
	node := u.Node()
	switch {
	case node == "" && add:
		v.pending = v.pending.Plus(u.Requested())
	case node == "":
		v.pending = v.pending.Less(u.Requested())
	case add:
		v.used[node] = v.used[node].Plus(u.Requested())
	default:
		left := v.used[node].Less(u.Requested())
		if left == (summary.Amounts{}) {
			delete(v.used, node)
		} else {
			v.used[node] = left
		}
	}
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
	nodeObjs := v.nodeStore.List()
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.clock.Now()
	kept := v.claims[:0]
	claimed := v.pending
	for _, c := range v.claims {
		if now.Before(c.until) {
			kept = append(kept, c)
			claimed = claimed.Plus(c.requests)
		}
	}
	v.claims = kept
	nodes := make([]Node, 0, len(nodeObjs))
	for _, obj := range nodeObjs {
		if n, ok := obj.(*corev1.Node); ok {
			nodes = append(nodes, Node{Node: n, Free: summary.AllocatableOf(n).Less(v.used[n.Name])})
		}
	}
	verdict := Fits(pod, requests, nodes, claimed)
	if verdict.Fits && hold {
		v.claims = append(v.claims, claim{namespace: pod.Namespace, requests: requests, until: now.Add(v.claimTTL)})
	}
	return verdict
}
