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
type nodePods struct {
	informer cache.SharedIndexInformer
	node     string
}

var _ corev1informers.PodInformer = nodePods{}

func (n nodePods) Informer() cache.SharedIndexInformer {
	return nodeInformer{SharedIndexInformer: n.informer, node: n.node}
}

func (n nodePods) Lister() corelisters.PodLister {
	return nodeLister{all: corelisters.NewPodLister(n.informer.GetIndexer()), node: n.node}
}

// onNode reports whether obj (a pod or a tombstone of one) is bound to node.
func onNode(obj any, node string) bool {
	switch t := obj.(type) {
	case *corev1.Pod:
		return t.Spec.NodeName == node
	case cache.DeletedFinalStateUnknown:
		pod, ok := t.Obj.(*corev1.Pod)
		return ok && pod.Spec.NodeName == node
	default:
		return false
	}
}

// nodeInformer filters the handlers added to it. A pod that gets bound to
// the node is an add, one that leaves it a delete (FilteringResourceEventHandler).
type nodeInformer struct {
	cache.SharedIndexInformer
	node string
}

func (i nodeInformer) filter(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	return cache.FilteringResourceEventHandler{FilterFunc: func(obj any) bool { return onNode(obj, i.node) }, Handler: h}
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
	all  corelisters.PodLister
	node string
}

func (l nodeLister) List(selector labels.Selector) ([]*corev1.Pod, error) {
	pods, err := l.all.List(selector)
	return onlyNode(pods, l.node), err
}

func (l nodeLister) Pods(namespace string) corelisters.PodNamespaceLister {
	return nodeNamespaceLister{all: l.all.Pods(namespace), node: l.node}
}

type nodeNamespaceLister struct {
	all  corelisters.PodNamespaceLister
	node string
}

func (l nodeNamespaceLister) List(selector labels.Selector) ([]*corev1.Pod, error) {
	pods, err := l.all.List(selector)
	return onlyNode(pods, l.node), err
}

func (l nodeNamespaceLister) Get(name string) (*corev1.Pod, error) {
	pod, err := l.all.Get(name)
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != l.node {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return pod, nil
}

func onlyNode(pods []*corev1.Pod, node string) []*corev1.Pod {
	out := pods[:0:0]
	for _, p := range pods {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out
}
