package summary

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// DefaultInterval is how often at most a summary is written.
const DefaultInterval = 5 * time.Second

// callTimeout bounds every call to the API server, so that a hung call
// delays the summaries by one timeout, not for ever.
const callTimeout = 10 * time.Second

// boundPods selects the pods that hold resources on a node, as
// kube-scheduler's own cache of assigned pods once did: a pod enters the
// cache when it is bound and leaves it when it ends.
var boundPods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("spec.nodeName", ""),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
).String()

// Invitation is what a summary says about the invitation it is for.
type Invitation struct {
	// Name is the Source ("<namespace>/<name>") or ClusterSource ("<name>"),
	// written to status.invitation.
	Name string
	// Namespaces the invitation covers.
	Namespaces []string
	// CreateNamespaces: the target's agent creates covered namespaces that
	// do not exist.
	CreateNamespaces bool
	// KeepSourceLabels: the invitation lets the source's candidates carry
	// their source pods' labels.
	KeepSourceLabels bool
	// Quota is the invitation's quota, if it sets one.
	Quota corev1.ResourceList
	// Labels of the ClusterSummary object (an owner, for example). Labels
	// others put on it are left alone.
	Labels map[string]string
}

// Publisher keeps one ClusterSummary per invitation up to date. The
// invitation controller says which with Set and Remove; the publisher
// recomputes the aggregate when nodes or pods change and writes each
// summary at most once per interval, only when its content (all but
// status.updateTime) differs from what is stored. A summary that is missing
// or was changed by someone else is written again within an interval.
//
// It runs on the leader only (NeedLeaderElection), and Start is called
// once. Set and Remove may be called at any time, before Start too.
type Publisher struct {
	client       client.Client
	interval     time.Duration
	topologyKeys []string
	clock        clock.Clock

	nodes, pods         cache.SharedIndexInformer
	nodeStore, podStore cache.Store

	// wake tells the loop that something may be due.
	wake chan struct{}

	mu          sync.Mutex
	invitations map[string]Invitation
	deleting    map[string]time.Time // summaries to delete, and when to try
	schedule    *writeSchedule
	stale       bool      // the aggregate misses a node or pod change
	nextCheck   time.Time // when every summary is compared with what is stored

	// aggregate is used by the loop only.
	aggregate v1alpha1.ClusterSummaryStatus
}

var (
	_ manager.Runnable               = &Publisher{}
	_ manager.LeaderElectionRunnable = &Publisher{}
)

// The publisher watches nodes and pods and owns the ClusterSummaries.
// +kubebuilder:rbac:groups="",resources=nodes;pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=clustersummaries,verbs=get;list;watch;create;update;delete

// NewPublisher prepares a publisher; Start runs it. kube lists and watches
// nodes and pods through the publisher's own informers (see the package
// doc). c reads and writes ClusterSummaries, so its scheme must know
// v1alpha1; the manager's client is right: it reads from the manager's
// cache, and a write based on a stale read fails on the resourceVersion and
// is tried again an interval later. interval is how often at most a summary
// is written (DefaultInterval when zero or less); topologyKeys are the node
// labels the summary reports free totals for (DefaultTopologyKeys when nil).
func NewPublisher(kube kubernetes.Interface, c client.Client, interval time.Duration, topologyKeys []string) *Publisher {
	p := newPublisher(c, interval, topologyKeys, clock.RealClock{})
	p.nodes = coreinformers.NewNodeInformer(kube, 0, cache.Indexers{})
	p.pods = coreinformers.NewFilteredPodInformer(kube, metav1.NamespaceAll, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = boundPods })
	// Neither informer has started: setting a transform cannot fail.
	_ = p.nodes.SetTransform(TrimNode)
	_ = p.pods.SetTransform(TrimPod)
	p.nodeStore, p.podStore = p.nodes.GetStore(), p.pods.GetStore()
	_, _ = p.nodes.AddEventHandler(p.handler(nodeChanged))
	_, _ = p.pods.AddEventHandler(p.handler(podChanged))
	return p
}

func newPublisher(c client.Client, interval time.Duration, topologyKeys []string, clk clock.Clock) *Publisher {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if topologyKeys == nil {
		topologyKeys = DefaultTopologyKeys
	}
	return &Publisher{
		client:       c,
		interval:     interval,
		topologyKeys: slices.Clone(topologyKeys),
		clock:        clk,
		wake:         make(chan struct{}, 1),
		invitations:  make(map[string]Invitation),
		deleting:     make(map[string]time.Time),
		schedule:     newWriteSchedule(interval),
		stale:        true,
	}
}

func (p *Publisher) handler(changed func(oldObj, newObj any) bool) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { p.capacityChanged() },
		UpdateFunc: func(oldObj, newObj any) {
			if changed(oldObj, newObj) {
				p.capacityChanged()
			}
		},
		DeleteFunc: func(any) { p.capacityChanged() },
	}
}

// NeedLeaderElection makes the publisher a leader-only Runnable: two agents
// writing the same summaries would only fight.
func (p *Publisher) NeedLeaderElection() bool { return true }

// Set publishes a summary named name for an invitation, or updates what it
// says about the invitation.
func (p *Publisher) Set(name string, inv Invitation) {
	inv.Namespaces = slices.Clone(inv.Namespaces)
	inv.Labels = maps.Clone(inv.Labels)
	p.mu.Lock()
	p.invitations[name] = inv
	delete(p.deleting, name)
	p.schedule.Touch(name)
	p.mu.Unlock()
	p.signal()
}

// Remove stops publishing a summary and deletes it (in the background, and
// again until the API server confirms).
func (p *Publisher) Remove(name string) {
	p.mu.Lock()
	delete(p.invitations, name)
	p.schedule.Forget(name)
	p.deleting[name] = time.Time{} // at once
	p.mu.Unlock()
	p.signal()
}

func (p *Publisher) capacityChanged() {
	p.mu.Lock()
	p.stale = true
	p.schedule.TouchAll()
	p.mu.Unlock()
	p.signal()
}

func (p *Publisher) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Start watches nodes and pods and publishes until ctx ends. Summaries are
// first written once both caches are filled, so that no source sees a
// summary of half a cluster.
func (p *Publisher) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("summary")
	ctx = logr.NewContext(ctx, log)
	// A cluster that invites no source (a source only) has nothing to
	// publish: it does not watch its nodes and every bound pod (each
	// source pod, bound to a virtual node) until it has.
	if !p.waitForWork(ctx) {
		return nil // ctx ended
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.nodes.RunWithContext(ctx) })
	wg.Go(func() { p.pods.RunWithContext(ctx) })
	if !cache.WaitForNamedCacheSyncWithContext(ctx, p.nodes.HasSynced, p.pods.HasSynced) {
		return nil // ctx ended
	}
	log.Info("Publishing cluster summaries", "interval", p.interval, "topologyKeys", p.topologyKeys)
	for {
		next := p.pass(ctx)
		timer := p.clock.NewTimer(max(next.Sub(p.clock.Now()), 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-p.wake:
		case <-timer.C():
		}
		timer.Stop()
	}
}

// waitForWork returns true once there is a summary to keep or to delete,
// false if ctx ends first.
func (p *Publisher) waitForWork(ctx context.Context) bool {
	for {
		p.mu.Lock()
		work := len(p.invitations) > 0 || len(p.deleting) > 0
		p.mu.Unlock()
		if work {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-p.wake:
		}
	}
}

// pass does what is due: deletes removed summaries, recomputes the
// aggregate when it is stale and a summary is due, and writes the due
// summaries that differ from what is stored. It returns when the next pass
// is needed.
func (p *Publisher) pass(ctx context.Context) time.Time {
	log := logr.FromContextOrDiscard(ctx)
	now := p.clock.Now()

	p.mu.Lock()
	if !now.Before(p.nextCheck) {
		// Someone may have changed or deleted a summary; comparing with
		// the cache is cheap and writes nothing when all is well.
		p.schedule.TouchAll()
		p.nextCheck = now.Add(p.interval)
	}
	due := p.schedule.Due(now)
	invitations := make(map[string]Invitation, len(due))
	for _, name := range due {
		invitations[name] = p.invitations[name]
	}
	var deleting []string
	for name, at := range p.deleting {
		if !now.Before(at) {
			deleting = append(deleting, name)
		}
	}
	slices.Sort(deleting)
	recompute := p.stale && len(due) > 0
	if recompute {
		p.stale = false
	}
	p.mu.Unlock()

	for _, name := range deleting {
		err := p.delete(ctx, name)
		p.mu.Lock()
		if _, still := p.deleting[name]; still { // not Set again meanwhile
			if err != nil {
				p.deleting[name] = now.Add(p.interval)
			} else {
				delete(p.deleting, name)
			}
		}
		p.mu.Unlock()
		if err != nil {
			log.Error(err, "Deleting a cluster summary failed; will retry", "summary", name, "retryIn", p.interval)
		}
	}
	if recompute {
		p.recompute()
	}
	for _, name := range due {
		p.mu.Lock()
		_, set := p.invitations[name]
		p.mu.Unlock()
		if !set {
			continue // removed meanwhile
		}
		wrote, err := p.publish(ctx, name, invitations[name], now)
		p.mu.Lock()
		switch {
		case err != nil:
			p.schedule.Retry(name, now)
		case wrote:
			p.schedule.Wrote(name, now)
		}
		p.mu.Unlock()
		if err != nil {
			log.Error(err, "Publishing a cluster summary failed; will retry", "summary", name, "retryIn", p.interval)
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	next := p.nextCheck
	if at, ok := p.schedule.Next(); ok && at.Before(next) {
		next = at
	}
	for _, at := range p.deleting {
		if at.Before(next) {
			next = at
		}
	}
	return next
}

func (p *Publisher) recompute() {
	start := p.clock.Now()
	nodeObjs := p.nodeStore.List()
	nodes := make([]*corev1.Node, 0, len(nodeObjs))
	for _, obj := range nodeObjs {
		if n, ok := obj.(*corev1.Node); ok {
			nodes = append(nodes, n)
		}
	}
	podObjs := p.podStore.List()
	pods := make([]*PodUsage, 0, len(podObjs))
	for _, obj := range podObjs {
		if pod, ok := obj.(*PodUsage); ok {
			pods = append(pods, pod)
		}
	}
	p.aggregate = aggregate(nodes, pods, p.topologyKeys)
	aggregateSeconds.Observe(p.clock.Since(start).Seconds())
}

// desired is the summary for an invitation as of the last aggregate.
func (p *Publisher) desired(name string, inv Invitation, now time.Time) *v1alpha1.ClusterSummary {
	status := *p.aggregate.DeepCopy()
	status.Invitation = inv.Name
	status.Namespaces = slices.Compact(slices.Sorted(slices.Values(inv.Namespaces)))
	status.CreateNamespaces = inv.CreateNamespaces
	status.KeepSourceLabels = inv.KeepSourceLabels
	status.Quota = inv.Quota.DeepCopy()
	status.UpdateTime = &metav1.Time{Time: now}
	return &v1alpha1.ClusterSummary{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: maps.Clone(inv.Labels)},
		Status:     status,
	}
}

// publish writes one summary if what is stored differs from what it should
// say; wrote tells whether it did.
func (p *Publisher) publish(ctx context.Context, name string, inv Invitation, now time.Time) (wrote bool, err error) {
	desired := p.desired(name, inv, now)
	if err := Validate(&desired.Status); err != nil {
		// Sources would refuse it: a bug, or an invitation beyond the
		// bounds (too many namespaces).
		return false, fmt.Errorf("summary %s would be refused by its source: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var stored v1alpha1.ClusterSummary
	err = p.client.Get(ctx, client.ObjectKey{Name: name}, &stored)
	switch {
	case apierrors.IsNotFound(err):
		if err := p.client.Create(ctx, desired); err != nil {
			writes.WithLabelValues("create", "error").Inc()
			return false, fmt.Errorf("creating ClusterSummary %s: %w", name, err)
		}
		writes.WithLabelValues("create", "success").Inc()
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading ClusterSummary %s: %w", name, err)
	}
	update, ok := updated(&stored, desired)
	if !ok {
		return false, nil
	}
	if err := p.client.Update(ctx, update); err != nil {
		writes.WithLabelValues("update", "error").Inc()
		return false, fmt.Errorf("updating ClusterSummary %s: %w", name, err)
	}
	writes.WithLabelValues("update", "success").Inc()
	return true, nil
}

func (p *Publisher) delete(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err := p.client.Delete(ctx, &v1alpha1.ClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsNotFound(err) {
		writes.WithLabelValues("delete", "error").Inc()
		return fmt.Errorf("deleting ClusterSummary %s: %w", name, err)
	}
	writes.WithLabelValues("delete", "success").Inc()
	return nil
}

// updated returns the stored summary with the desired labels and status,
// and false when it already carries them (status.updateTime aside). Labels
// and annotations others added stay; the update carries the stored
// resourceVersion, so it fails rather than overwrite a change it did not
// see.
func updated(stored, desired *v1alpha1.ClusterSummary) (*v1alpha1.ClusterSummary, bool) {
	if sameContent(stored, desired) {
		return nil, false
	}
	out := stored.DeepCopy()
	if out.Labels == nil && len(desired.Labels) > 0 {
		out.Labels = make(map[string]string, len(desired.Labels))
	}
	maps.Copy(out.Labels, desired.Labels)
	out.Status = *desired.Status.DeepCopy()
	return out, true
}

// sameContent reports whether stored carries desired's labels and status,
// but for status.updateTime. Quantities compare by value: "1Gi" read back
// from the API server equals 1073741824 computed here.
func sameContent(stored, desired *v1alpha1.ClusterSummary) bool {
	for k, v := range desired.Labels {
		if got, ok := stored.Labels[k]; !ok || got != v {
			return false
		}
	}
	a, b := stored.Status, desired.Status
	a.UpdateTime, b.UpdateTime = nil, nil
	return equality.Semantic.DeepEqual(a, b)
}
