package vnode

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	corev1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/slim"
)

// Delegates is what a virtual node needs of its target; the agent implements
// it over the target's informer.
//
// Get must answer from a synced cache: a source pod whose delegate Get does
// not find fails for good (see the package doc). An implementation that has
// a HasSynced() bool method is waited for before any pod is looked at.
type Delegates interface {
	// Get returns the delegate (the bound candidate in the target) of a
	// source pod, or (nil, nil) when none exists.
	Get(source *corev1.Pod) (*corev1.Pod, error)
	// Lost reports whether the delegate of a source pod is gone as the
	// target's API server says, not its cache: a cache that lags (a
	// watch behind, an agent resumed after a pause that is no longer the
	// leader) must not fail a pod that runs.
	Lost(ctx context.Context, source *corev1.Pod) (bool, error)
	// Delete deletes the delegate of a source pod; nil if already gone. The
	// source pod carries its deletion grace period, if it has one.
	Delete(ctx context.Context, source *corev1.Pod) error
	// OnChange registers f, called with the delegate whenever one changes
	// (or is deleted). f does not block.
	OnChange(f func(delegate *corev1.Pod))
}

// Config describes one virtual node.
type Config struct {
	// NodeName is the node's name, e.g. protocol.VirtualNodeName("", target).
	NodeName string
	// Target is the target's name, for labels, messages and events.
	Target string
	// Namespace is the only namespace whose pods the node runs (a
	// namespaced Target's); a pod of another namespace bound to it is
	// rejected. Empty: every namespace. Target and Namespace are the
	// node's owner (protocol.NodeOwner): the node is taken only when it
	// is missing or already theirs (CheckOwner).
	Namespace string
	// Retiring marks a node of the old namespaced form
	// (protocol.LegacyVirtualNodeName) that runs only the pods still bound
	// to it: it is unschedulable, and its owner deletes it once they end.
	Retiring bool
	// Accept, when set, says which pods bound to the node are the
	// target's: those it refuses (elected for another target that shared
	// the node's name before names were one-to-one) are left alone,
	// neither mirrored nor failed.
	Accept func(*corev1.Pod) bool
	// MirrorOnly mirrors the node's accepted pods without registering
	// the node or running its node controller: the node belongs to
	// another target, which keeps it Ready. For a retiring node's pods
	// only.
	MirrorOnly bool
	// PodCIDRs are the target's pod networks this cluster routes to: a
	// delegate's pod IP is mirrored onto its source pod only inside one of
	// them (ParsePodCIDRs). Empty: no pod IP is mirrored.
	PodCIDRs []netip.Prefix
	// Labels are extra node labels (region, zone, ...). They cannot replace
	// the labels every virtual node has (TypeLabel, RoleLabel, TargetLabel,
	// kubernetes.io/hostname).
	Labels map[string]string
	// Client is the source cluster's.
	Client kubernetes.Interface
	// Delegates finds and deletes delegates in the target.
	Delegates Delegates
	// LostDelegate, when set, is told each time a source pod fails
	// because its delegate vanished in the target (DelegateLost).
	LostDelegate func(now time.Time)
	// Pods is an informer over source pods, of this node and maybe others,
	// that the caller starts; the virtual node sees only those bound to it.
	// Several virtual nodes share one copy of each pod this way. It should
	// keep what slim.SourcePod keeps. Nil: the virtual node watches the pods
	// bound to it with an informer of its own.
	Pods cache.SharedIndexInformer

	// LeaseDuration is the node Lease's duration; default 40s, as a kubelet.
	LeaseDuration time.Duration
	// LeaseRenewInterval is how often the Lease is renewed; default a
	// quarter of LeaseDuration.
	LeaseRenewInterval time.Duration
	// StatusUpdateInterval is how often the Node's status is written even
	// when it does not change; default 1m.
	StatusUpdateInterval time.Duration
	// Capacity is the node's capacity and allocatable; default
	// DefaultCapacity().
	Capacity corev1.ResourceList
	// Workers is the number of source pods synced at once; default 16.
	Workers int
	// EventRecorder records events on source pods; default one that writes
	// to Client as component "flotilla-vnode".
	EventRecorder record.EventRecorder

	// Address is the node's InternalIP: where the source's API server
	// reaches the agent's kubelet API for logs, exec, attach and
	// port-forward. Empty: the node has no InternalIP, and those fail.
	Address string
	// KubeletPort is the port of the agent's kubelet API, published as the
	// node's daemonEndpoints; 0 when Address is empty.
	KubeletPort int32
	// Status is what the node says about its target as it changes: Ready or
	// not, capacity, labels. Nil: always Ready, with Capacity.
	Status *Status
}

// Defaults of Config.
const (
	DefaultLeaseDuration        = 40 * time.Second
	DefaultStatusUpdateInterval = time.Minute
	DefaultWorkers              = 16
)

func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	if cfg.NodeName == "" {
		errs = append(errs, errors.New("no node name"))
	}
	if cfg.Target == "" {
		errs = append(errs, errors.New("no target"))
	}
	if cfg.Client == nil {
		errs = append(errs, errors.New("no client"))
	}
	if cfg.Delegates == nil {
		errs = append(errs, errors.New("no delegates"))
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.LeaseRenewInterval == 0 {
		cfg.LeaseRenewInterval = cfg.LeaseDuration / 4
	}
	if cfg.LeaseDuration < time.Second || cfg.LeaseRenewInterval <= 0 || cfg.LeaseRenewInterval >= cfg.LeaseDuration {
		errs = append(errs, fmt.Errorf("lease duration %s and renew interval %s: want a duration of 1s or more and a shorter interval",
			cfg.LeaseDuration, cfg.LeaseRenewInterval))
	}
	if cfg.StatusUpdateInterval == 0 {
		cfg.StatusUpdateInterval = DefaultStatusUpdateInterval
	}
	if cfg.Capacity == nil {
		cfg.Capacity = DefaultCapacity()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Status == nil {
		cfg.Status = NewStatus()
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("virtual node %q: %w", cfg.NodeName, err)
	}
	return cfg, nil
}

// RBAC a virtual node needs in the source cluster.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=kube-node-lease,resources=leases,verbs=get;create;update;patch
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Run registers the node, keeps it Ready with Lease heartbeats, mirrors the
// delegates onto the source pods bound to it, and returns when ctx is done
// (removing nothing: the node stays so pods keep their binding across agent
// restarts). It returns an error, before ctx is done, when the node cannot
// be registered or the node controller stops; the caller retries.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("node", cfg.NodeName, "target", cfg.Target)
	ctx = klog.NewContext(ctx, logger)
	ctx = vklog.WithLogger(ctx, vkLogger{l: logger.WithName("virtual-kubelet")})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if s, ok := cfg.Delegates.(interface{ HasSynced() bool }); ok {
		if !cache.WaitForCacheSync(ctx.Done(), s.HasSynced) {
			return nil // ctx is done
		}
	}

	recorder := cfg.EventRecorder
	if recorder == nil {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "flotilla-vnode", Host: cfg.NodeName})
	}

	if cfg.MirrorOnly {
		return mirrorOnly(ctx, cfg, recorder)
	}
	nodes := cfg.Client.CoreV1().Nodes()
	want := newNode(cfg, cfg.Status.Get(), time.Now())
	if err := adoptNode(ctx, nodes, want); err != nil {
		return fmt.Errorf("virtual node %s: %w", cfg.NodeName, err)
	}
	p := provider{status: cfg.Status, node: func(s State) *corev1.Node { return newNode(cfg, s, time.Now()) }}
	nc, err := node.NewNodeController(p, want, nodes,
		node.WithNodeEnableLeaseV1WithRenewInterval(cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease),
			int32(math.Ceil(cfg.LeaseDuration.Seconds())), cfg.LeaseRenewInterval),
		node.WithNodeStatusUpdateInterval(cfg.StatusUpdateInterval),
		node.WithNodeStatusUpdateErrorHandler(recreateNode(nodes, cfg)),
	)
	if err != nil {
		return fmt.Errorf("virtual node %s: creating the node controller: %w", cfg.NodeName, err)
	}

	// Only the pods bound to this node.
	onNode := fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName)
	var podInformer, foreign corev1informers.PodInformer
	if cfg.Pods != nil {
		podInformer = nodePods{informer: cfg.Pods, node: cfg.NodeName, accept: cfg.Accept}
		// The shared informer holds source pods only. Pods bound to the
		// node that are not (a DaemonSet's that tolerates every taint) are
		// watched apart: there are none unless something went wrong, so
		// this informer costs a watch and holds nothing.
		var stop func()
		foreign, stop = watchNodePods(ctx, cfg, fields.AndSelectors(onNode,
			fields.OneTermNotEqualSelector("spec.schedulerName", protocol.SourceSchedulerName)))
		defer func() {
			cancel() // Shutdown waits for the informers, which stop with ctx
			stop()
		}()
	} else {
		var stop func()
		podInformer, stop = watchNodePods(ctx, cfg, onNode)
		if cfg.Accept != nil {
			podInformer = nodePods{informer: podInformer.Informer(), node: cfg.NodeName, accept: cfg.Accept}
		}
		defer func() {
			cancel()
			stop()
		}()
	}
	m := newMirror(cfg, podInformer.Lister(), recorder)
	defer m.queue.ShutDown()
	if _, err := podInformer.Informer().AddEventHandler(m.sourceHandler()); err != nil {
		return fmt.Errorf("virtual node %s: watching its pods: %w", cfg.NodeName, err)
	}
	synced := []cache.InformerSynced{podInformer.Informer().HasSynced}
	if foreign != nil {
		m.foreign = foreign.Lister()
		if _, err := foreign.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    m.enqueue,
			UpdateFunc: func(_, obj any) { m.enqueue(obj) },
		}); err != nil {
			return fmt.Errorf("virtual node %s: watching pods bound to it by others: %w", cfg.NodeName, err)
		}
		synced = append(synced, foreign.Informer().HasSynced)
	}
	cfg.Delegates.OnChange(m.delegateChanged)

	go nc.Run(ctx) //nolint:errcheck // reported by nc.Err
	defer func() {
		cancel()
		<-nc.Done()
	}()

	// until waits for ready (nil: forever) unless the node controller stops
	// or ctx ends first; then Run must return err.
	until := func(ready <-chan struct{}) (end bool, err error) {
		select {
		case <-ready:
			return false, nil
		case <-nc.Done():
			return true, stopped(ctx, cfg.NodeName, "node controller", nc.Err())
		case <-ctx.Done():
			return true, nil
		}
	}
	if end, err := until(nc.Ready()); end {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx is done
	}
	mirrorDone := make(chan struct{})
	go func() {
		defer close(mirrorDone)
		m.run(ctx, cfg.Workers)
	}()
	defer func() {
		cancel()
		<-mirrorDone
	}()
	logger.Info("Virtual node running")

	_, err = until(nil)
	return err
}

// owner is the target that owns the node.
func (cfg Config) owner() protocol.NodeOwner {
	return protocol.NodeOwner{Namespace: cfg.Namespace, Name: cfg.Target}
}

// mirrorOnly mirrors the accepted pods bound to a node that another target
// owns and keeps Ready, until ctx ends.
func mirrorOnly(ctx context.Context, cfg Config, recorder record.EventRecorder) error {
	if cfg.Pods == nil || cfg.Accept == nil {
		return fmt.Errorf("virtual node %s: mirroring only needs the shared pod informer and Accept", cfg.NodeName)
	}
	podInformer := nodePods{informer: cfg.Pods, node: cfg.NodeName, accept: cfg.Accept}
	m := newMirror(cfg, podInformer.Lister(), recorder)
	defer m.queue.ShutDown()
	if _, err := podInformer.Informer().AddEventHandler(m.sourceHandler()); err != nil {
		return fmt.Errorf("virtual node %s: watching its pods: %w", cfg.NodeName, err)
	}
	cfg.Delegates.OnChange(m.delegateChanged)
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		return nil // ctx is done
	}
	klog.FromContext(ctx).Info("Mirroring the pods of a virtual node another target owns")
	m.run(ctx, cfg.Workers)
	return nil
}

// watchNodePods starts an informer over the pods that selector picks (of
// this node), kept as slim.SourcePod keeps them, until ctx ends; stop waits
// for it to end.
func watchNodePods(ctx context.Context, cfg Config, selector fields.Selector) (informer corev1informers.PodInformer, stop func()) {
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector.String() }),
		informers.WithTransform(slim.SourcePod))
	informer = factory.Core().V1().Pods()
	informer.Informer() // registered before Start
	factory.Start(ctx.Done())
	return informer, factory.Shutdown
}

// recreateNode registers the node again when someone deleted it while the
// agent runs. (The source's pod garbage collector deletes the pods bound to
// a deleted node, and with them their delegates.)
func recreateNode(nodes typedcorev1.NodeInterface, cfg Config) node.ErrorHandler {
	return func(ctx context.Context, err error) error {
		if !apierrors.IsNotFound(err) {
			return err
		}
		klog.FromContext(ctx).Info("Virtual node was deleted, registering it again")
		_, err = nodes.Create(ctx, newNode(cfg, cfg.Status.Get(), time.Now()), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Someone registered it meanwhile: keep writing it only if
			// it is this target's.
			existing, getErr := nodes.Get(ctx, cfg.NodeName, metav1.GetOptions{})
			if getErr != nil {
				return fmt.Errorf("reading node %s registered again: %w", cfg.NodeName, getErr)
			}
			return CheckOwner(existing, cfg.owner())
		}
		if err != nil {
			return fmt.Errorf("registering node %s again: %w", cfg.NodeName, err)
		}
		return nil
	}
}

// stopped is Run's result when a controller has stopped: nil when ctx is
// done, Run's clean end, and an error otherwise.
func stopped(ctx context.Context, nodeName, controller string, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("stopped without an error")
	}
	return fmt.Errorf("virtual node %s: %s: %w", nodeName, controller, err)
}
