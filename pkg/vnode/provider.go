package vnode

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// provider is the virtual-kubelet pod provider of one virtual node. It runs
// nothing itself: the delegate runs in the target. It tells virtual-kubelet
// the status the source pods should have, and deletes delegates.
//
// Status is derived, every time, from the source pod and its delegate as
// observed (desiredStatus); the only memory is known, the source pods last
// seen bound to the node, which virtual-kubelet needs to delete the delegate
// of a source pod that is already gone from the API.
type provider struct {
	node      string
	target    string
	delegates Delegates
	pods      corev1listers.PodLister // source pods bound to this node
	client    kubernetes.Interface
	recorder  record.EventRecorder
	now       func() time.Time
	logger    klog.Logger
	queue     workqueue.TypedRateLimitingInterface[string]

	mu     sync.Mutex
	known  map[string]*corev1.Pod
	notify func(*corev1.Pod)
}

var (
	_ node.PodLifecycleHandler = (*provider)(nil)
	_ node.PodNotifier         = (*provider)(nil)
)

func newProvider(cfg Config, pods corev1listers.PodLister, recorder record.EventRecorder, logger klog.Logger) *provider {
	return &provider{
		logger:    logger,
		node:      cfg.NodeName,
		target:    cfg.Target,
		delegates: cfg.Delegates,
		pods:      pods,
		client:    cfg.Client,
		recorder:  recorder,
		now:       time.Now,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "vnode-status-" + cfg.NodeName},
		),
		known: map[string]*corev1.Pod{},
	}
}

// CreatePod remembers the source pod: its delegate exists already, the
// agent created it before binding the source pod here.
func (p *provider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	p.remember(p.cached(pod))
	return nil
}

// UpdatePod remembers the source pod; changes of its spec are not carried
// to the delegate.
func (p *provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	p.remember(p.cached(pod))
	return nil
}

// cached returns the informer's copy of pod when it has the same one:
// virtual-kubelet hands the provider deep copies, and remembering those
// would hold one more copy of every pod of the node.
func (p *provider) cached(pod *corev1.Pod) *corev1.Pod {
	if c, err := p.pods.Pods(pod.Namespace).Get(pod.Name); err == nil && c.UID == pod.UID && c.ResourceVersion == pod.ResourceVersion {
		return c
	}
	return pod
}

// DeletePod deletes the delegate. The source pod is reported terminated once
// the delegate is gone (syncStatus), which happens later: the delegate's
// kubelet honours its grace period.
func (p *provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	if err := p.delegates.Delete(ctx, pod); err != nil {
		return fmt.Errorf("deleting the delegate of pod %s in target %s: %w", key, p.target, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted delegate", "pod", klog.KObj(pod))
	if _, err := p.pods.Pods(pod.Namespace).Get(pod.Name); apierrors.IsNotFound(err) {
		p.forget(key)
	}
	p.queue.Add(key)
	return nil
}

// GetPod returns a source pod the node knows, with the status it should have.
func (p *provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	src := p.lookup(podKey(namespace, name))
	if src == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on virtual node %s", namespace, name, p.node)
	}
	return p.withStatus(src)
}

// GetPodStatus returns the status a source pod should have.
func (p *provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods returns every source pod the node knows, with the status it
// should have.
func (p *provider) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	known := make([]*corev1.Pod, 0, len(p.known))
	for _, pod := range p.known {
		known = append(known, pod)
	}
	p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(known))
	for _, src := range known {
		pod, err := p.withStatus(src)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Listing pods: reporting the pod with its last status", "pod", klog.KObj(src))
			pod = src.DeepCopy()
		}
		out = append(out, pod)
	}
	return out, nil
}

// NotifyPods registers virtual-kubelet's callback for status changes.
func (p *provider) NotifyPods(_ context.Context, f func(*corev1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = f
}

func (p *provider) withStatus(src *corev1.Pod) (*corev1.Pod, error) {
	out := src.DeepCopy()
	if isTerminal(src.Status.Phase) {
		return out, nil
	}
	delegate, err := p.delegates.Get(src)
	if err != nil {
		return nil, fmt.Errorf("getting the delegate of pod %s/%s in target %s: %w", src.Namespace, src.Name, p.target, err)
	}
	out.Status = desiredStatus(src, delegate, p.target, p.now())
	return out, nil
}

func (p *provider) remember(pod *corev1.Pod) {
	if pod.Spec.NodeName != p.node {
		return
	}
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	p.known[key] = pod
	p.mu.Unlock()
	p.queue.Add(key)
}

func (p *provider) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.known, key)
}

func (p *provider) lookup(key string) *corev1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.known[key]
}

// sourceHandler watches the source pods bound to the node: every change may
// call for a new status (a new binding, a deletion, a status written by
// someone else).
func (p *provider) sourceHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				p.remember(pod)
			}
		},
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				p.remember(pod)
			}
		},
	}
}

// delegateChanged queues the source pod of a delegate that changed or was
// deleted. syncStatus checks that the source pod is bound to this node.
func (p *provider) delegateChanged(delegate *corev1.Pod) {
	if delegate == nil {
		return
	}
	ns, name := delegate.Annotations[protocol.SourceNamespaceAnnotation], delegate.Annotations[protocol.SourceNameAnnotation]
	if ns == "" || name == "" {
		p.logger.V(5).Info("Ignoring a delegate without source annotations", "delegate", klog.KObj(delegate))
		return
	}
	p.queue.Add(podKey(ns, name))
}

// run processes the status queue with workers until ctx is done.
func (p *provider) run(ctx context.Context, workers int) {
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for p.processNext(ctx) {
			}
		})
	}
	wg.Wait()
}

func (p *provider) processNext(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	if err := p.syncStatus(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Syncing the status of a source pod, will retry", "pod", key)
		p.queue.AddRateLimited(key)
		return true
	}
	p.queue.Forget(key)
	return true
}

// syncStatus makes a source pod's status what its delegate says, through
// virtual-kubelet, and finishes the deletion of a source pod whose delegate
// is gone and whose status is terminal.
func (p *provider) syncStatus(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	source, err := p.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting source pod %s: %w", key, err)
	}
	if source.Spec.NodeName != p.node {
		return nil
	}
	delegate, err := p.delegates.Get(source)
	if err != nil {
		return fmt.Errorf("getting the delegate of pod %s in target %s: %w", key, p.target, err)
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(source))

	if isTerminal(source.Status.Phase) {
		// A terminal status is final. Once the delegate is gone, nothing
		// holds a deleted source pod any more.
		if source.DeletionTimestamp != nil && delegate == nil {
			return p.finishDeletion(ctx, source)
		}
		return nil
	}

	status := desiredStatus(source, delegate, p.target, p.now())
	if equality.Semantic.DeepEqual(status, source.Status) {
		return nil
	}
	if delegate == nil && source.DeletionTimestamp == nil {
		logger.Info("Delegate lost, the source pod fails", "target", p.target)
		p.recorder.Eventf(source, corev1.EventTypeWarning, ReasonDelegateLost,
			"The delegate of this pod in target %s no longer exists", p.target)
	}
	p.mu.Lock()
	notify := p.notify
	p.mu.Unlock()
	if notify == nil {
		return fmt.Errorf("pod %s: the pod controller has not registered for status updates yet", key)
	}
	pod := source.DeepCopy()
	pod.Status = status
	logger.V(4).Info("Mirroring the delegate's status", "phase", status.Phase, "podIP", status.PodIP)
	notify(pod)
	return nil
}

// finishDeletion deletes a terminated source pod with a zero grace period,
// as a kubelet does once its containers have stopped. The UID precondition
// spares a new pod of the same name.
func (p *provider) finishDeletion(ctx context.Context, source *corev1.Pod) error {
	zero := int64(0)
	uid := source.UID
	err := p.client.CoreV1().Pods(source.Namespace).Delete(ctx, source.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finishing the deletion of pod %s/%s: %w", source.Namespace, source.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Finished the deletion of a source pod whose delegate is gone", "pod", klog.KObj(source))
	return nil
}

func isTerminal(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

func podKey(namespace, name string) string {
	return types.NamespacedName{Namespace: namespace, Name: name}.String()
}
