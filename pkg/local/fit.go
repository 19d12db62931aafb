package local

import (
	"fmt"
	"iter"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/summary"
)

// Node is what the decision knows of one node of the cluster: the node as
// summary.TrimNode keeps it and what its bound pods leave free.
type Node struct {
	Node *corev1.Node
	Free summary.Amounts
}

// Verdict is the decision for one pod, and why, in words for a log line.
type Verdict struct {
	Fits   bool
	Reason string
}

// Fits decides whether a pod that asks requests has room in this cluster
// now. It does when a node that may take the pod (MayTake) has that much
// free, and when the nodes that may take it have that much free in total
// once claimed is set aside: what the pods admitted here and not bound yet
// ask (they may land on any of those nodes). The second check keeps a burst
// from being admitted against the same free room many times over; it is
// conservative, for claimed counts pods that may go to other nodes. It
// stops at the first nodes that settle both, as kube-scheduler stops at
// enough feasible nodes: in a cluster with room a pod costs a few nodes'
// look, not every node's.
func Fits(pod *corev1.Pod, requests summary.Amounts, nodes iter.Seq[Node], claimed summary.Amounts) Verdict {
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	var total summary.Amounts
	oneHasRoom, anyMay := false, false
	for n := range nodes {
		if !MayTake(pod, affinity, n.Node) {
			continue
		}
		anyMay = true
		total = total.Plus(n.Free)
		if n.Free.Covers(requests) {
			oneHasRoom = true
		}
		if oneHasRoom && total.Less(claimed).Covers(requests) {
			return Verdict{Fits: true, Reason: "a node here has room"}
		}
	}
	switch {
	case !anyMay:
		return Verdict{Reason: "no node here may take the pod (selector, affinity, taints, readiness)"}
	case !oneHasRoom:
		return Verdict{Reason: "no node here that may take the pod has room for its requests"}
	}
	return Verdict{Reason: fmt.Sprintf("the room here (%v free on the nodes that may take the pod) is claimed by pods admitted and not bound yet (%v)", total, claimed)}
}

// takesPods reports whether node takes pods at all: Ready, not cordoned,
// not a virtual node (whose capacity is another cluster's).
func takesPods(node *corev1.Node) bool {
	return node != nil && !node.Spec.Unschedulable && !summary.IsVirtual(node) && summary.IsReady(node)
}

// MayTake reports whether the cluster's scheduler could bind pod to node,
// capacity aside: the node is Ready, not cordoned, not a virtual node
// (whose capacity is another cluster's), its NoSchedule and NoExecute taints
// are tolerated and the pod's required node affinity and node selector
// match it. A node selector or affinity that does not parse matches
// nothing.
func MayTake(pod *corev1.Pod, affinity nodeaffinity.RequiredNodeAffinity, node *corev1.Node) bool {
	if !takesPods(node) {
		return false
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, summary.KeepsPodsOff, false); untolerated {
		return false
	}
	ok, err := affinity.Match(node)
	return ok && err == nil
}
