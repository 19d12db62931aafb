package vnode

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corev1informers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// nodePods is one node's view of an informer over the pods of several
// nodes: its handlers and its lister see only the pods bound to that node,
// as they would with an informer that selects spec.nodeName. Several virtual
// nodes can share one informer (and one copy of each pod) this way.
//
// accept, when set, narrows them further to the pods it accepts (Config.Accept).
type nodePods struct {
	informer cache.SharedIndexInformer
	node     string
	accept   func(*corev1.Pod) bool
}

var _ corev1informers.PodInformer = nodePods{}

func (n nodePods) Informer() cache.SharedIndexInformer {
	return nodeInformer{SharedIndexInformer: n.informer, node: n.node, accept: n.accept}
}

func (n nodePods) Lister() corelisters.PodLister {
	return nodeLister{all: corelisters.NewPodLister(n.informer.GetIndexer()), node: n.node, accept: n.accept}
}

// onNode reports whether obj (a pod or a tombstone of one) is bound to node
// and accepted.
func onNode(obj any, node string, accept func(*corev1.Pod) bool) bool {
	switch t := obj.(type) {
	case *corev1.Pod:
		return isNodes(t, node, accept)
	case cache.DeletedFinalStateUnknown:
		pod, ok := t.Obj.(*corev1.Pod)
		return ok && isNodes(pod, node, accept)
	default:
		return false
	}
}

func isNodes(pod *corev1.Pod, node string, accept func(*corev1.Pod) bool) bool {
	return pod.Spec.NodeName == node && (accept == nil || accept(pod))
}

// nodeInformer filters the handlers added to it. A pod that gets bound to
// the node is an add, one that leaves it a delete (FilteringResourceEventHandler).
type nodeInformer struct {
	cache.SharedIndexInformer
	node   string
	accept func(*corev1.Pod) bool
}

func (i nodeInformer) filter(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	return cache.FilteringResourceEventHandler{FilterFunc: func(obj any) bool { return onNode(obj, i.node, i.accept) }, Handler: h}
}

func (i nodeInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandler(i.filter(h))
}

func (i nodeInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(i.filter(h), resync)
}

func (i nodeInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, opts cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithOptions(i.filter(h), opts)
}

// nodeLister lists and gets only the node's pods; another node's pod is
// NotFound.
type nodeLister struct {
	all    corelisters.PodLister
	node   string
	accept func(*corev1.Pod) bool
}

func (l nodeLister) List(selector labels.Selector) ([]*corev1.Pod, error) {
	pods, err := l.all.List(selector)
	return onlyNode(pods, l.node, l.accept), err
}

func (l nodeLister) Pods(namespace string) corelisters.PodNamespaceLister {
	return nodeNamespaceLister{all: l.all.Pods(namespace), node: l.node, accept: l.accept}
}

type nodeNamespaceLister struct {
	all    corelisters.PodNamespaceLister
	node   string
	accept func(*corev1.Pod) bool
}

func (l nodeNamespaceLister) List(selector labels.Selector) ([]*corev1.Pod, error) {
	pods, err := l.all.List(selector)
	return onlyNode(pods, l.node, l.accept), err
}

func (l nodeNamespaceLister) Get(name string) (*corev1.Pod, error) {
	pod, err := l.all.Get(name)
	if err != nil {
		return nil, err
	}
	if !isNodes(pod, l.node, l.accept) {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return pod, nil
}

func onlyNode(pods []*corev1.Pod, node string, accept func(*corev1.Pod) bool) []*corev1.Pod {
	out := pods[:0:0]
	for _, p := range pods {
		if isNodes(p, node, accept) {
			out = append(out, p)
		}
	}
	return out
}
