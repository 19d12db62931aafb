package target

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

// Finalizer keeps a deleted Target until the pods running there have ended,
// so that they stay mirrored; then its virtual node is removed.
const Finalizer = protocol.Prefix + "drain"

// TargetNamespaceLabel is on the virtual node of a namespaced Target.
const TargetNamespaceLabel = protocol.TargetNamespaceLabel

// Defaults of Controller.
const (
	DefaultResyncPeriod = 10 * time.Second
	// DefaultNotReadyAfter is how long a target may fail to answer before
	// its virtual node turns NotReady: long enough to ride out a restart of
	// its API server, short enough that pods move within a minute or two.
	DefaultNotReadyAfter = 20 * time.Second
	// notReadyResync is how often a target that is not Ready is looked at
	// again, so a fixed Secret or a target back up shows within seconds.
	notReadyResync = 3 * time.Second
	probeTimeout   = 5 * time.Second
)

// RBAC the controller needs.
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=targets;clustertargets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=targets/status;clustertargets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=targets/finalizers;clustertargets/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;update;patch
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=clusterprofiles,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=get;update;patch

// Controller turns Targets and ClusterTargets into running targets: for each
// it connects a Target (client, candidate informer), puts it in the Set that
// placement reads, and runs its virtual node. A target is started, replaced
// and stopped while the agent runs, each with its own context, so a broken
// one is reported in its status and never holds up the others.
type Controller struct {
	// Client reads Targets and ClusterTargets from the manager's cache and
	// writes their status; Reader reads Secrets, uncached.
	Client client.Client
	Reader client.Reader
	// Kube is the source cluster's clientset, for the virtual nodes.
	Kube kubernetes.Interface
	// Self is the source cluster's own config, for self targets.
	Self *rest.Config
	// SourceCluster is this cluster's name as its targets know it.
	SourceCluster string
	// Namespace is the agent's namespace, where a ClusterTarget's Secret is
	// looked for when its reference names no namespace.
	Namespace string
	// Targets is where running targets are put for placement.
	Targets *Set
	// SourcePods is the shared informer over source pods.
	SourcePods toolscache.SharedIndexInformer
	Recorder   events.EventRecorder
	// VNodeWorkers is each virtual node's number of workers.
	VNodeWorkers int
	// KubeletAddress and KubeletPort are where the agent serves the kubelet
	// API of its virtual nodes (their InternalIP and daemonEndpoints); an
	// empty address leaves the nodes without one.
	KubeletAddress string
	KubeletPort    int32
	// ResyncPeriod is how often a Ready target is probed; default 10s.
	ResyncPeriod time.Duration
	// NotReadyAfter is how long a target's API must fail to answer before
	// its virtual node turns NotReady; default 20s.
	NotReadyAfter time.Duration
	// NoScheduler: this cluster's release runs no Flotilla scheduler, so a
	// self target is reported not Ready (SchedulerDisabled).
	NoScheduler bool
	// TokenRenewAfter is the share of a token's lifetime after which it is
	// renewed; default 0.5.
	TokenRenewAfter float64
	// TenantPodCIDRs are the networks inside which a namespaced Target's
	// spec.podCIDRs must lie; none: a namespaced Target may name none, so
	// its pods never show a pod IP here.
	TenantPodCIDRs []netip.Prefix
	// Clock tells the time of what the controller waits for (a silent
	// target's NotReadyAfter, a target held back by lost delegates, a
	// token's renewal, a failed virtual node's restart); nil is the real
	// one.
	Clock clock.Clock

	// dial connects to a target; nil is New. Tests dial fake clientsets.
	dial func(Config) (*Target, error)
	// runVNode runs a virtual node until its context ends; nil is
	// vnode.Run. Tests run none.
	runVNode func(context.Context, vnode.Config) error

	mu      sync.Mutex
	running map[string]*running
	base    context.Context
	started chan struct{}
}

// clock is Clock, or the real one when none is set.
func (c *Controller) clock() clock.Clock {
	if c.Clock == nil {
		return clock.RealClock{}
	}
	return c.Clock
}

// SetupWithManager registers the controllers of both kinds.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	c.defaults()
	if err := mgr.Add(c); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("clustertarget").For(&v1alpha1.ClusterTarget{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(targetOfNode(false)), builder.WithPredicates(nodeSpecChanged)).
		Complete(reconcile.Func(c.reconcileClusterTarget)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("target").For(&v1alpha1.Target{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(targetOfNode(true)), builder.WithPredicates(nodeSpecChanged)).
		Complete(reconcile.Func(c.reconcileTarget))
}

// defaults readies the controller and fills in what is not set.
func (c *Controller) defaults() {
	c.running = map[string]*running{}
	c.started = make(chan struct{})
	if c.ResyncPeriod <= 0 {
		c.ResyncPeriod = DefaultResyncPeriod
	}
	if c.NotReadyAfter <= 0 {
		c.NotReadyAfter = DefaultNotReadyAfter
	}
	if c.TokenRenewAfter <= 0 || c.TokenRenewAfter >= 1 {
		c.TokenRenewAfter = 0.5
	}
}

// reconcileClusterTarget runs, drains or stops a ClusterTarget.
func (c *Controller) reconcileClusterTarget(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := &v1alpha1.ClusterTarget{}
	return c.reconcileObject(ctx, req, obj, func() view { return c.clusterTargetView(obj) })
}

// reconcileTarget runs, drains or stops a Target.
func (c *Controller) reconcileTarget(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := &v1alpha1.Target{}
	return c.reconcileObject(ctx, req, obj, func() view { return targetView(obj) })
}

// Start keeps the context the targets run in: the leader's. When it ends,
// every target stops.
func (c *Controller) Start(ctx context.Context) error {
	c.mu.Lock()
	c.base = ctx
	close(c.started)
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	all := slices.Collect(maps.Values(c.running))
	c.running = map[string]*running{}
	c.mu.Unlock()
	for _, r := range all {
		c.Targets.Remove(r.t)
		r.stop()
	}
	return nil
}

// NeedLeaderElection: targets run on the leader only.
func (c *Controller) NeedLeaderElection() bool { return true }

func (c *Controller) reconcileObject(ctx context.Context, req reconcile.Request, obj client.Object, viewOf func() view) (reconcile.Result, error) {
	select {
	case <-c.started:
	case <-ctx.Done():
		return reconcile.Result{}, ctx.Err()
	}
	key := req.Name
	if req.Namespace != "" {
		key = req.Namespace + "/" + req.Name
	}
	if err := c.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without our finalizer (removed by hand): stop it.
			c.stop(key)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	v := viewOf()
	if v.obj.GetDeletionTimestamp() != nil {
		return c.drain(ctx, v)
	}
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		controllerutil.AddFinalizer(obj, Finalizer)
		if err := c.Client.Patch(ctx, obj, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer to target %s: %w", v.name, err)
		}
	}
	return c.connect(ctx, v)
}

// connect makes the running target match the spec, probes it and reports.
func (c *Controller) connect(ctx context.Context, v view) (reconcile.Result, error) {
	before := v.status.DeepCopy()
	if err := refusedSpec(v, c.TenantPodCIDRs); err != nil {
		// Nothing is started for it; what runs of an earlier spec keeps
		// running, as with a broken Secret. The spec's next change brings
		// the target back here.
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, err.Error())
		return c.report(ctx, v, before, 0)
	}
	cfg, hash, reason, err := c.resolve(ctx, &v)
	r := c.get(v.name)
	if err != nil {
		// Keep what runs (its credentials may still work), but say what
		// is wrong with the new spec.
		setCondition(v, v1alpha1.TargetCredentialsValid, metav1.ConditionFalse, reason, err.Error())
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, reason, err.Error())
		return c.report(ctx, v, before, notReadyResync)
	}
	// The node is registered only for a target whose connection is good:
	// a refused kubeconfig or profile gets none.
	if err := c.claim(ctx, v); err != nil {
		taken, ok := vnode.IsTaken(err)
		if !ok {
			// The source's API server did not answer: the node is
			// claimed again when the virtual node (re)starts.
			return reconcile.Result{}, fmt.Errorf("claiming the virtual node of target %s: %w", v.name, err)
		}
		// Another target owns the node (or it is no virtual node):
		// nothing runs for this one, and the owner is not disturbed.
		c.stop(v.name)
		v.status.VirtualNode = ""
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonVirtualNodeTaken, takenMessage(taken))
		return c.report(ctx, v, before, notReadyResync)
	}
	place := placeOf(v, cfg)
	// A target whose old place was draining and that points there again is
	// started afresh, back in the set.
	pointedBack := false
	if r != nil {
		if t, ok := c.Targets.Draining(v.name); ok && t == r.t {
			pointedBack = true
		}
	}
	if r == nil || r.hash != hash || pointedBack {
		if r != nil && r.place != place {
			if draining, res, err := c.drainOldPlace(ctx, v, r, before); draining {
				return res, err
			}
		}
		if r != nil {
			c.stop(v.name)
		}
		t, err := c.newTarget(v, cfg)
		if err != nil {
			setCondition(v, v1alpha1.TargetCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonKubeconfigInvalid, err.Error())
			setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonKubeconfigInvalid, err.Error())
			return c.report(ctx, v, before, notReadyResync)
		}
		// A target whose node is cordoned or tainted keeps pods off from
		// its start.
		c.followNode(ctx, t)
		r = c.start(t, hash, place)
	} else if cfg.BearerToken != "" && cfg.BearerToken != r.t.Token() {
		r.t.SetToken(cfg.BearerToken)
	}
	read := v.read
	if read == "" {
		read = "The kubeconfig was read"
	}
	setCondition(v, v1alpha1.TargetCredentialsValid, metav1.ConditionTrue, v1alpha1.ReasonConnected, read)
	v.status.VirtualNode = r.t.NodeName
	if err := c.retire(ctx, r); err != nil {
		klog.FromContext(ctx).Error(err, "Serving the pods of the target's node of the old form", "target", v.name, "node", r.t.LegacyNodeName)
	}
	c.reportOverlaps(v, r.t)
	c.renew(ctx, v, r.t)

	var h Health
	if r.t.SummaryName() != "" {
		h = c.readSummary(ctx, v, r.t)
	}
	if h.Reason == "" {
		h = r.t.Probe(ctx)
	}
	h = slowNotGone(h, r.t.HeardWithin(c.NotReadyAfter))
	if v.self && c.NoScheduler && h.Reachable && h.Authorized {
		// The cluster answers, so its virtual node stays Ready; but no
		// scheduler here would take the candidates.
		h.Reason, h.Message = v1alpha1.ReasonSchedulerDisabled,
			"This cluster's Flotilla release runs no scheduler (scheduler.enabled=false): candidates sent to it would stay Pending; enable it, or remove this self target"
	}
	now := c.clock().Now()
	if why := r.t.LostHeldBack(now); why != "" && h.Reachable && h.Authorized && h.Reason == v1alpha1.ReasonConnected {
		// Its virtual node stays Ready: the pods that run there are not
		// touched; only new ones are not sent.
		h.Reason, h.Message = v1alpha1.ReasonDelegatesLost, why
	}
	c.followNode(ctx, r.t)
	if h.Reachable && h.Authorized && h.Reason == v1alpha1.ReasonConnected {
		h.Cordoned, h.Tainted = r.t.Cordoned(), r.t.Tainted()
	}
	h.apply(v, r.t.HasSynced())
	r.t.setHealth(h, now)
	r.observeHealth(h, now, c.NotReadyAfter)
	resync := c.ResyncPeriod
	if !meta.IsStatusConditionTrue(v.status.Conditions, v1alpha1.TargetReady) {
		resync = notReadyResync
	}
	return c.report(ctx, v, before, resync)
}
