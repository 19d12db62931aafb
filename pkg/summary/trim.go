package summary

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/slim"
)

// The publisher's caches hold every node and every bound pod of the
// cluster, trimmed to what Aggregate reads. Both transforms are client-go
// TransformFuncs: they may be given an object they already trimmed (and
// return it unchanged), and pass anything else through.

// PodUsage is all the publisher's cache keeps of a pod, in place of the pod:
// its key and version, its node and what it takes there. A decoded pod
// weighs kilobytes even when trimmed (a corev1.Pod is over a kilobyte of
// empty fields); a PodUsage, a few dozen bytes and its strings.
type PodUsage struct {
	namespace, name string
	// resourceVersion tells the informer an update from a resync.
	resourceVersion string
	nodeName        string
	// requested is the pod's requests as kube-scheduler counts them
	// (RequestsOf): overhead, init containers, sidecars, pod-level requests
	// and in-place resizes folded in.
	requested Amounts
	// ended: the pod succeeded or failed and holds nothing.
	ended bool
	// unschedulable: the pod is not bound and its scheduler said it found
	// no node for it (PodScheduled False, reason Unschedulable).
	unschedulable bool
}

// GetObjectMeta gives the informer the key and version it stores the usage
// under.
func (u *PodUsage) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: u.namespace, Name: u.name, ResourceVersion: u.resourceVersion}
}

// Node is the node the pod is bound to; empty while it is not.
func (u *PodUsage) Node() string { return u.nodeName }

// Namespace is the pod's namespace.
func (u *PodUsage) Namespace() string { return u.namespace }

// Requested is what the pod takes of its node (RequestsOf).
func (u *PodUsage) Requested() Amounts { return u.requested }

// Ended reports whether the pod succeeded or failed: it holds nothing.
func (u *PodUsage) Ended() bool { return u.ended }

// Unschedulable reports whether the pod is not bound and its scheduler
// found no node for it when it last tried.
func (u *PodUsage) Unschedulable() bool { return u.unschedulable }

func usageOf(pod *corev1.Pod) *PodUsage {
	return &PodUsage{
		namespace:       pod.Namespace,
		name:            pod.Name,
		resourceVersion: pod.ResourceVersion,
		nodeName:        pod.Spec.NodeName,
		requested:       RequestsOf(pod),
		ended:           ended(pod),
		unschedulable:   pod.Spec.NodeName == "" && unschedulable(pod),
	}
}

// TrimPod turns a pod into its PodUsage, as an informer's transform.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	u := usageOf(pod)
	u.namespace = slim.Intern(u.namespace)
	u.nodeName = slim.Intern(u.nodeName)
	return u, nil
}

// TrimNode keeps a node's name, labels, cordon, the taints that keep pods
// off (NoSchedule and NoExecute), its Ready condition (without the times
// that change at every heartbeat) and its allocatable cpu, memory and pods.
// Nodes are few: they stay *corev1.Node.
func TrimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:            node.Name,
			UID:             node.UID,
			ResourceVersion: node.ResourceVersion,
			Labels:          node.Labels,
		},
		Spec: corev1.NodeSpec{Unschedulable: node.Spec.Unschedulable},
	}
	for _, t := range node.Spec.Taints {
		if KeepsPodsOff(&t) {
			out.Spec.Taints = append(out.Spec.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
			break
		}
	}
	if a := node.Status.Allocatable; len(a) > 0 {
		out.Status.Allocatable = corev1.ResourceList{}
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
			if q, ok := a[name]; ok {
				out.Status.Allocatable[name] = q
			}
		}
	}
	return out, nil
}

// podChanged reports whether an update of a pod changes what Aggregate
// sees: most pod updates (conditions, IPs, container states) do not.
func podChanged(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*PodUsage)
	n, ok2 := newObj.(*PodUsage)
	if !ok1 || !ok2 {
		return true
	}
	return o.nodeName != n.nodeName || o.requested != n.requested || o.ended != n.ended
}

// nodeChanged reports whether an update of a trimmed node changes what
// Aggregate sees: a node's status is rewritten every few minutes with new
// heartbeat times, images and the like.
func nodeChanged(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*corev1.Node)
	n, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
		!equality.Semantic.DeepEqual(o.Spec, n.Spec) ||
		!equality.Semantic.DeepEqual(o.Status, n.Status)
}

func unschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}
