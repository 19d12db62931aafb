// Package target owns the source agent's connection to one target cluster: a
// client, an informer over the candidates this source placed there, and the
// target's health. A Target is a value with its own lifecycle, so a broken or
// unreachable target is reported and never stalls the others.
package target

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/slim"
)

// callTimeout bounds every call to a target, so a hung target costs one
// timeout, not a stuck worker.
const callTimeout = 10 * time.Second

const bySourceIndex = "flotilla-source"

// Target is one target cluster as a source sees it.
type Target struct {
	// Name is how the source calls the target; it names the virtual node.
	Name string
	// Self is true when the target is the source cluster itself.
	Self bool

	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer

	mu      sync.Mutex
	lastErr error

	// writes remembers creates, deletes and annotations not yet in the cache.
	writes *recent
}

// New prepares a target; Start begins watching it.
func New(name string, self bool, cfg *rest.Config, sourceCluster string) (*Target, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = callTimeout
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 100, 200
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("target %s: creating client: %w", name, err)
	}
	selector := labels.SelectorFromSet(labels.Set{
		protocol.CandidateLabel:     "true",
		protocol.SourceClusterLabel: sourceCluster,
	}).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }),
		// Of a candidate the source reads metadata, node name and status.
		informers.WithTransform(slim.Candidate))
	informer := factory.Core().V1().Pods().Informer()
	t := &Target{Name: name, Self: self, client: client, factory: factory, informer: informer, writes: newRecent()}
	if err := informer.AddIndexers(cache.Indexers{bySourceIndex: indexBySource}); err != nil {
		return nil, err
	}
	_ = informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		t.setErr(fmt.Errorf("watching candidates: %w", err))
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	return t, nil
}

func indexBySource(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	return []string{SourceKey(pod)}, nil
}

// SourceKey is "<namespace>/<name>" of the source pod a candidate stands for.
func SourceKey(candidate *corev1.Pod) string {
	return candidate.Annotations[protocol.SourceNamespaceAnnotation] + "/" + candidate.Annotations[protocol.SourceNameAnnotation]
}

// Start starts the informer; it returns at once.
func (t *Target) Start(ctx context.Context) {
	t.factory.Start(ctx.Done())
}

// Shutdown stops the informer's goroutines after ctx passed to Start ended.
func (t *Target) Shutdown() { t.factory.Shutdown() }

// HasSynced reports whether the informer has listed the target once.
func (t *Target) HasSynced() bool { return t.informer.HasSynced() }

// OnCandidate registers a handler for every change of a candidate.
func (t *Target) OnCandidate(f func(candidate *corev1.Pod)) {
	call := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			f(pod)
		}
	}
	_, _ = t.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, obj any) { call(obj) },
		DeleteFunc: call,
	})
}

// Err is the target's last error, nil when it is healthy.
func (t *Target) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

func (t *Target) setErr(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastErr = err
}

// observe records the outcome of a call: success clears the error.
func (t *Target) observe(err error) error {
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) {
		t.setErr(err)
	} else {
		t.setErr(nil)
	}
	return err
}

// Candidate returns the candidate with the given name from the cache.
func (t *Target) Candidate(namespace, name string) (*corev1.Pod, bool) {
	obj, ok, err := t.informer.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}

// CandidatesOf lists the cached candidates of a source pod (any UID).
func (t *Target) CandidatesOf(namespace, name string) []*corev1.Pod {
	objs, err := t.informer.GetIndexer().ByIndex(bySourceIndex, namespace+"/"+name)
	if err != nil {
		return nil
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok {
			out = append(out, pod)
		}
	}
	return out
}

// Candidates lists every cached candidate.
func (t *Target) Candidates() []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range t.informer.GetIndexer().List() {
		if pod, ok := o.(*corev1.Pod); ok {
			out = append(out, pod)
		}
	}
	return out
}

// Create creates a candidate; an existing one is not an error.
func (t *Target) Create(ctx context.Context, candidate *corev1.Pod) error {
	key := "create/" + candidate.Namespace + "/" + candidate.Name + "/" + candidate.Labels[protocol.SourceUIDLabel]
	if t.writes.has(key) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := t.client.CoreV1().Pods(candidate.Namespace).Create(ctx, candidate, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		t.writes.add(key)
		return t.observe(nil)
	}
	if err != nil {
		return t.observe(fmt.Errorf("target %s: creating candidate %s/%s: %w", t.Name, candidate.Namespace, candidate.Name, err))
	}
	t.writes.add(key)
	return t.observe(nil)
}

// Delete deletes a candidate if it still has the given UID (empty: any).
func (t *Target) Delete(ctx context.Context, namespace, name string, uid types.UID) error {
	key := "delete/" + namespace + "/" + name + "/" + string(uid)
	if t.writes.has(key) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := t.client.CoreV1().Pods(namespace).Delete(ctx, name, opts)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		t.writes.add(key)
		return t.observe(nil)
	}
	if err != nil {
		return t.observe(fmt.Errorf("target %s: deleting candidate %s/%s: %w", t.Name, namespace, name, err))
	}
	t.writes.add(key)
	klog.V(4).InfoS("Deleted candidate", "target", t.Name, "pod", klog.KRef(namespace, name))
	return t.observe(nil)
}

// Annotate merges annotations into a candidate (a nil value removes a key).
func (t *Target) Annotate(ctx context.Context, namespace, name string, annotations map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	key := "annotate/" + namespace + "/" + name + "/" + string(patch)
	if t.writes.has(key) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err = t.client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return t.observe(fmt.Errorf("target %s: annotating candidate %s/%s: %w", t.Name, namespace, name, err))
	}
	t.writes.add(key)
	return t.observe(nil)
}
