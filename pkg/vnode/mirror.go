package vnode

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// mirror keeps the source pods bound to one virtual node in step with their
// delegates: it writes the status each source pod should have, deletes the
// delegate of a source pod being deleted (or gone), and finishes the
// deletion once the delegate is gone. It does the work of a kubelet's pod
// workers for pods whose containers run elsewhere.
//
// It has one queue keyed by source pod, fed by the source pods' informer and
// by the target's delegate changes, and keeps no copy of any pod: the status
// is derived, every time, from the cached source pod and its cached delegate
// (desiredStatus). The only memory is gone, the last state of source pods
// deleted from the API, until their delegate is deleted too.
//
// virtual-kubelet's pod controller did this before; it kept two more copies
// of every pod (the last one synced, a deep copy of the last status) and
// compared pods by reflection on every change, for features a virtual node
// without containers of its own does not use (downward API resolution,
// provider pod lifecycle).
type mirror struct {
	node      string
	target    string
	namespace string
	podCIDRs  []netip.Prefix
	delegates Delegates
	pods      corev1listers.PodLister // source pods bound to this node
	// foreign lists the pods bound to this node that are not source pods;
	// nil when pods lists them too.
	foreign  corev1listers.PodLister
	client   kubernetes.Interface
	recorder record.EventRecorder
	status   *Status
	lost     func(time.Time)
	now      func() time.Time
	queue    workqueue.TypedRateLimitingInterface[string]

	mu   sync.Mutex
	gone map[string]*corev1.Pod
}

func newMirror(cfg Config, pods corev1listers.PodLister, recorder record.EventRecorder) *mirror {
	return &mirror{
		node:      cfg.NodeName,
		target:    cfg.Target,
		namespace: cfg.Namespace,
		podCIDRs:  cfg.PodCIDRs,
		delegates: cfg.Delegates,
		pods:      pods,
		client:    cfg.Client,
		recorder:  recorder,
		status:    cfg.Status,
		lost:      cfg.LostDelegate,
		now:       time.Now,
		// Per-pod backoff of failures only: client-go's default limiter also
		// passes every first enqueue through a 10 per second bucket, and a
		// burst of pods would queue up behind it.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "vnode-" + cfg.NodeName},
		),
		gone: map[string]*corev1.Pod{},
	}
}

// sourceHandler queues every source pod of the node that changes, and
// remembers the last state of one deleted from the API, whose delegate must
// go too.
func (m *mirror) sourceHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.enqueue(obj) },
		UpdateFunc: func(_, obj any) { m.enqueue(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			key := podKey(pod.Namespace, pod.Name)
			m.mu.Lock()
			m.gone[key] = pod
			m.mu.Unlock()
			m.queue.Add(key)
		},
	}
}

func (m *mirror) enqueue(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok {
		m.queue.Add(podKey(pod.Namespace, pod.Name))
	}
}

// delegateChanged queues the source pod of a delegate that changed or was
// deleted. sync checks that the source pod is bound to this node.
func (m *mirror) delegateChanged(delegate *corev1.Pod) {
	if delegate == nil {
		return
	}
	ns, name := delegate.Annotations[protocol.SourceNamespaceAnnotation], delegate.Annotations[protocol.SourceNameAnnotation]
	if ns == "" || name == "" {
		klog.V(5).InfoS("Ignoring a delegate without source annotations", "node", m.node, "delegate", klog.KObj(delegate))
		return
	}
	m.queue.Add(podKey(ns, name))
}

// run processes the queue with workers until ctx is done.
func (m *mirror) run(ctx context.Context, workers int) {
	go func() {
		<-ctx.Done()
		m.queue.ShutDown()
	}()
	go m.followReadiness(ctx)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for m.processNext(ctx) {
			}
		})
	}
	wg.Wait()
}

// followReadiness looks at every pod of the node again when the target
// stops or starts answering, and tells each pod's owner.
func (m *mirror) followReadiness(ctx context.Context) {
	for {
		flip := m.status.readyFlips()
		select {
		case <-ctx.Done():
			return
		case <-flip:
		}
		state := m.status.Get()
		pods, err := m.pods.List(labels.Everything())
		if err != nil {
			continue
		}
		for _, pod := range pods {
			if pod.Spec.NodeName != m.node || pod.DeletionTimestamp != nil || isTerminal(pod.Status.Phase) || !isSourcePod(pod) {
				continue
			}
			if state.Ready {
				m.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonTargetReady, "Target %s answers again", m.target)
			} else {
				m.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonTargetLost,
					"Target %s does not answer (%s); the pod is evicted once its node.kubernetes.io/not-ready toleration runs out, and its controller recreates it elsewhere", m.target, state.Message)
			}
			m.queue.Add(podKey(pod.Namespace, pod.Name))
		}
	}
}

func (m *mirror) processNext(ctx context.Context) bool {
	key, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(key)
	if err := m.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Syncing a source pod, will retry", "pod", key)
		m.queue.AddRateLimited(key)
		return true
	}
	m.queue.Forget(key)
	return true
}

// sync brings one source pod a step closer to what its delegate says.
func (m *mirror) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	source, err := m.pods.Pods(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting source pod %s: %w", key, err)
	}
	if err := m.deleteGone(ctx, key, source); err != nil {
		return err
	}
	if source == nil && m.foreign != nil {
		if pod, err := m.foreign.Pods(ns).Get(name); err == nil && pod.Spec.NodeName == m.node {
			return m.reject(ctx, pod, m.notPlaced())
		}
	}
	if source == nil || source.Spec.NodeName != m.node {
		return nil
	}
	if !isSourcePod(source) {
		return m.reject(ctx, source, m.notPlaced())
	}
	if m.namespace != "" && source.Namespace != m.namespace {
		return m.reject(ctx, source, fmt.Sprintf("Virtual node %s stands for target %s of namespace %s, which runs only that namespace's pods", m.node, m.target, m.namespace))
	}
	ready := m.status.Get().Ready
	delegate, err := m.delegates.Get(source)
	if err != nil {
		return fmt.Errorf("getting the delegate of pod %s in target %s: %w", key, m.target, err)
	}
	if source.DeletionTimestamp != nil {
		if err := m.deleteDelegate(ctx, source, delegate); err != nil {
			if ready {
				return err
			}
			return m.release(ctx, source, err)
		}
	}

	if isTerminal(source.Status.Phase) {
		// A terminal status is final. Once the delegate is gone, nothing
		// holds a deleted source pod any more.
		if source.DeletionTimestamp != nil && delegate == nil {
			return m.finishDeletion(ctx, source)
		}
		return nil
	}
	if !ready {
		// The cache of a target that does not answer is stale: its status
		// would undo what the node lifecycle controller says of the pods
		// of a NotReady node. The pod is looked at again when it answers.
		return nil
	}
	status := desiredStatus(source, delegate, m.target, m.podCIDRs, m.now())
	if equality.Semantic.DeepEqual(status, source.Status) {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(source))
	if delegate == nil && source.DeletionTimestamp == nil {
		// Failing a pod cannot be undone: the cache's word is not enough.
		lost, err := m.delegates.Lost(ctx, source)
		if err != nil {
			return fmt.Errorf("reading the delegate of pod %s, not in the cache of target %s: %w", key, m.target, err)
		}
		if !lost {
			return fmt.Errorf("the delegate of pod %s is in target %s but not yet in its cache", key, m.target)
		}
		logger.Info("Delegate lost, the source pod fails", "target", m.target)
		m.recorder.Eventf(source, corev1.EventTypeWarning, ReasonDelegateLost,
			"The delegate of this pod in target %s no longer exists", m.target)
	}
	logger.V(4).Info("Mirroring the delegate's status", "phase", status.Phase, "podIP", status.PodIP)
	// A shallow copy: the cached pod's maps are read, not written. The
	// resourceVersion makes a write based on a stale cache fail; the newer
	// pod queues this one again. The API server takes only the status (and
	// the metadata, which is the cached one) from pods/status.
	pod := *source
	pod.Status = status
	_, err = m.client.CoreV1().Pods(ns).UpdateStatus(ctx, &pod, metav1.UpdateOptions{})
	switch {
	case err == nil && delegate == nil && source.DeletionTimestamp == nil:
		if m.lost != nil {
			m.lost(m.now())
		}
		return nil
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		logger.V(4).Info("Status write lost a race with a newer pod version; the newer one is queued")
		return nil
	default:
		return fmt.Errorf("writing the status of pod %s: %w", key, err)
	}
}

// release finishes the deletion of a source pod whose delegate could not be
// deleted because the target does not answer, once the pod's grace period
// is over: the source never hangs on a target that is away. The delegate
// is deleted when the target answers again (the placement controller
// cleans up every candidate of a pod that is gone).
func (m *mirror) release(ctx context.Context, source *corev1.Pod, cause error) error {
	if wait := source.DeletionTimestamp.Sub(m.now()); wait > 0 {
		m.queue.AddAfter(podKey(source.Namespace, source.Name), wait)
		return nil
	}
	klog.FromContext(ctx).Info("Target does not answer; deleting the source pod without waiting for its delegate",
		"pod", klog.KObj(source), "target", m.target, "cause", cause.Error())
	m.recorder.Eventf(source, corev1.EventTypeWarning, ReasonDelegateOrphaned,
		"Target %s does not answer: the pod is deleted here, and its delegate there once the target answers again", m.target)
	return m.finishDeletion(ctx, source)
}

// reject fails a pod bound to the virtual node that is not a source pod (a
// DaemonSet's pod tolerating every taint, a pod with spec.nodeName set) or
// not of the namespace a namespaced Target's node serves, as a kubelet
// rejects a pod it cannot admit: its controller sees a failed pod and the
// reason, instead of a pod Pending forever. Its delegate is never looked
// for.
func (m *mirror) reject(ctx context.Context, pod *corev1.Pod, msg string) error {
	if isTerminal(pod.Status.Phase) {
		if pod.DeletionTimestamp != nil {
			return m.finishDeletion(ctx, pod)
		}
		return nil
	}
	klog.FromContext(ctx).Info("Rejecting a pod the virtual node does not run", "pod", klog.KObj(pod), "reason", msg)
	m.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonRejected, "%s", msg)
	update := *pod
	update.Status = terminatedStatus(pod, ReasonRejected, msg, "Never started: "+msg, true, m.now())
	_, err := m.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, &update, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("rejecting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func (m *mirror) notPlaced() string {
	return fmt.Sprintf("Virtual node %s stands for target %s and runs only pods that Flotilla placed there; this pod was bound to it by another scheduler or its spec.nodeName", m.node, m.target)
}

// isSourcePod reports whether a pod bound to a virtual node was placed
// there by Flotilla: only the webhook gives a pod the source scheduler
// name, which no scheduler serves.
func isSourcePod(pod *corev1.Pod) bool {
	return pod.Spec.SchedulerName == protocol.SourceSchedulerName
}

// deleteGone deletes the delegate of a source pod deleted from the API
// (its last state is in gone) unless current is that same pod.
func (m *mirror) deleteGone(ctx context.Context, key string, current *corev1.Pod) error {
	m.mu.Lock()
	last := m.gone[key]
	m.mu.Unlock()
	if last == nil {
		return nil
	}
	if current != nil && current.UID == last.UID || m.namespace != "" && last.Namespace != m.namespace {
		// Deleted and seen again (a relist): not gone after all. Or a pod
		// this node never ran: it has no delegate here.
		m.forgetGone(key, last)
		return nil
	}
	delegate, err := m.delegates.Get(last)
	if err != nil {
		return fmt.Errorf("getting the delegate of deleted pod %s in target %s: %w", key, m.target, err)
	}
	if err := m.deleteDelegate(ctx, last, delegate); err != nil {
		return err
	}
	m.forgetGone(key, last)
	return nil
}

// forgetGone drops the last state of a deleted pod unless a newer deletion
// of the same name replaced it meanwhile.
func (m *mirror) forgetGone(key string, last *corev1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone[key] == last {
		delete(m.gone, key)
	}
}

// deleteDelegate deletes the delegate of source unless it is gone or being
// deleted already.
func (m *mirror) deleteDelegate(ctx context.Context, source, delegate *corev1.Pod) error {
	if delegate == nil || delegate.DeletionTimestamp != nil {
		return nil
	}
	if err := m.delegates.Delete(ctx, source); err != nil {
		return fmt.Errorf("deleting the delegate of pod %s/%s in target %s: %w", source.Namespace, source.Name, m.target, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted delegate", "pod", klog.KObj(source), "target", m.target)
	return nil
}

// finishDeletion deletes a terminated source pod with a zero grace period,
// as a kubelet does once its containers have stopped. The UID precondition
// spares a new pod of the same name.
func (m *mirror) finishDeletion(ctx context.Context, source *corev1.Pod) error {
	zero := int64(0)
	uid := source.UID
	err := m.client.CoreV1().Pods(source.Namespace).Delete(ctx, source.Name, metav1.DeleteOptions{
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
