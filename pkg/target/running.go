package target

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

// running is one connected target and what runs for it.
type running struct {
	t    *Target
	hash string
	// place is where its pods run (placeOf): a change of it drains the
	// old place before the new one takes pods.
	place  string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// status is what its virtual node says of the target.
	status *vnode.Status

	mu sync.Mutex
	// answered is when the target last answered a probe (or started).
	answered time.Time
	// retiring runs the target's node of the old namespaced form while
	// pods are bound to it; nil when none runs.
	retiring *retiring
	// retired: that node is gone (or another's) and no pod is bound to
	// it, so it is not looked for again.
	retired atomic.Bool
}

// observeHealth turns the probes' outcomes into the virtual node's Ready:
// false once the target has not answered for notReadyAfter.
func (r *running) observeHealth(h Health, now time.Time, notReadyAfter time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	statuses := []*vnode.Status{r.status}
	if r.retiring != nil {
		statuses = append(statuses, r.retiring.status)
	}
	if h.Reachable && h.Authorized {
		r.answered = now
		for _, s := range statuses {
			s.SetReady(true, "", "")
		}
		return
	}
	if now.Sub(r.answered) >= notReadyAfter {
		for _, s := range statuses {
			s.SetReady(false, h.Reason, h.Message)
		}
	}
}

func (c *Controller) get(name string) *running {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running[name]
}

// start runs a target: it joins the Set (which gives it the candidate
// handlers), its informer starts, and its virtual node runs until stopped.
func (c *Controller) start(t *Target, hash, place string) *running {
	ctx, cancel := context.WithCancel(c.base)
	r := &running{t: t, hash: hash, place: place, ctx: ctx, cancel: cancel, done: make(chan struct{}), status: vnode.NewStatus(), answered: c.clock().Now()}
	c.mu.Lock()
	c.running[t.Name] = r
	c.mu.Unlock()
	c.Targets.Add(t)
	t.Start(ctx)
	var wg sync.WaitGroup
	if t.SummaryName() != "" {
		wg.Go(func() {
			t.watchSummary(ctx, func(s *v1alpha1.ClusterSummaryStatus) {
				t.SetNamespaces(s.Namespaces)
				t.setSummary(s)
				allocatable, free := Capacity(s)
				r.status.SetResources(allocatable, free, NodeLabels(s))
			})
		})
	}
	wg.Go(func() { c.runNode(ctx, c.nodeConfig(t, r.status)) })
	go func() {
		defer close(r.done)
		wg.Wait()
	}()
	klog.FromContext(ctx).Info("Target started", "target", t.Name, "node", t.NodeName)
	return r
}

// nodeConfig is the virtual node of a running target.
func (c *Controller) nodeConfig(t *Target, status *vnode.Status) vnode.Config {
	return vnode.Config{
		NodeName:  t.NodeName,
		Target:    nameOnly(t.Name),
		Namespace: t.Namespace,
		// A pod elected for another target is not this node's, even if
		// bound to it (the old namespaced form of that target's node was
		// this node's name).
		Accept:    func(pod *corev1.Pod) bool { return runsOn(pod, t.Name, t.NodeName, "") },
		PodCIDRs:  t.PodCIDRs,
		Labels:    maps.Clone(t.Labels),
		Client:    c.Kube,
		Delegates: Delegates{Target: t, SourceCluster: c.SourceCluster},
		// Losses hold the target back (HeldBack), as its status says
		// from its next look.
		LostDelegate: t.LostDelegate,
		Pods:         c.SourcePods,
		Workers:      c.VNodeWorkers,

		Address:     c.KubeletAddress,
		KubeletPort: c.KubeletPort,
		Status:      status,
	}
}

func (c *Controller) stop(name string) {
	c.mu.Lock()
	r := c.running[name]
	delete(c.running, name)
	c.mu.Unlock()
	if r != nil {
		c.Targets.Remove(r.t)
		r.stop()
	}
}

func (r *running) stop() {
	r.cancel()
	r.stopRetiring()
	<-r.done
	r.t.Shutdown()
}

// newTarget prepares the target v describes, connected with cfg.
func (c *Controller) newTarget(v view, cfg *rest.Config) (*Target, error) {
	podCIDRs, _ := vnode.ParsePodCIDRs(v.podCIDRs) // refusedSpec checked them
	dial := c.dial
	if dial == nil {
		dial = New
	}
	return dial(Config{
		Name: v.name, Namespace: v.namespace, Self: v.self, Labels: v.labels,
		NamespaceMapping: v.mapping, PodCIDRs: podCIDRs, REST: cfg, SourceCluster: c.SourceCluster,
		SummaryName: v.summary,
	})
}
