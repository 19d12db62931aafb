package target

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/pkg/placementpolicy"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

// A target's virtual node is a node as any other to the source's
// operators: cordoned (kubectl cordon, drain), it takes no new pod; tainted
// NoSchedule or NoExecute, it takes no pod that does not tolerate the
// taint. The agent follows the node's spec from the manager's cache of the
// virtual nodes; what runs there is not touched (kube-controller-manager
// evicts what does not tolerate a NoExecute taint, as on any node).

// setCordoned records whether the target's virtual node is cordoned
// (spec.unschedulable: kubectl cordon, or drain). A cordoned target gets no
// new pod, as kube-scheduler binds none to a cordoned node; what runs there,
// and candidates sent before, are not touched. It reports whether the
// target was cordoned and no longer is: the pods that wait may go there now.
func (t *Target) setCordoned(cordoned bool) (uncordoned bool) {
	return t.cordoned.Swap(cordoned) && !cordoned
}

// Cordoned says why the target gets no new pod because its virtual node is
// cordoned, "" when it is not.
func (t *Target) Cordoned() string {
	if !t.cordoned.Load() {
		return ""
	}
	return fmt.Sprintf("its virtual node %s is cordoned: no new pod is sent to this target until it is uncordoned (kubectl uncordon %s)", t.NodeName, t.NodeName)
}

// setNodeTaints records the virtual node's placementpolicy.OperatorTaints.
// It reports whether one it had is gone (or has another value): the pods
// that wait may go there now.
func (t *Target) setNodeTaints(taints []corev1.Taint) (lifted bool) {
	var was []corev1.Taint
	if p := t.taints.Swap(&taints); p != nil {
		was = *p
	}
	for _, old := range was {
		if !slices.ContainsFunc(taints, func(now corev1.Taint) bool {
			return now.Key == old.Key && now.Value == old.Value && now.Effect == old.Effect
		}) {
			return true
		}
	}
	return false
}

// Tainted names the taints of the target's virtual node that keep off the
// pods that do not tolerate them, "" when there are none.
func (t *Target) Tainted() string {
	taints := t.NodeTaints()
	if len(taints) == 0 {
		return ""
	}
	names := make([]string, len(taints))
	for i := range taints {
		names[i] = taints[i].ToString()
	}
	return "its virtual node's taints keep off the pods that do not tolerate them: " + strings.Join(names, ", ")
}

// NodeTaints are the taints of the target's virtual node that keep off the
// pods that do not tolerate them (placementpolicy.OperatorTaints): such a
// pod gets no candidate there.
func (t *Target) NodeTaints() []corev1.Taint {
	if p := t.taints.Load(); p != nil {
		return *p
	}
	return nil
}

// nodeSpecChanged passes the events of a node that may change what a
// target's virtual node lets through: its creation, its deletion, and an
// update of its cordon or its taints; not the status its node controller
// writes every few seconds.
var nodeSpecChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*corev1.Node)
		n, okNew := e.ObjectNew.(*corev1.Node)
		return okOld && okNew && (o.Spec.Unschedulable != n.Spec.Unschedulable || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints))
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// targetOfNode maps a virtual node to the ClusterTarget (namespaced false)
// or Target (true) it stands for, by the labels the agent gives it. A node
// relabelled to name another target only has that one looked at: a target
// reads its own node, by name.
func targetOfNode(namespaced bool) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		l := o.GetLabels()
		name := l[vnode.TargetLabel]
		ns, inNamespace := l[TargetNamespaceLabel]
		if name == "" || inNamespace != namespaced {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
	}
}

// followNode reads the target's virtual node and records whether it is
// cordoned and its operator taints; when that lets pods go there that
// could not before (uncordoned, a taint gone), the pods that wait are
// looked at again.
func (c *Controller) followNode(ctx context.Context, t *Target) {
	cordoned, taints, ok := c.readNode(ctx, t)
	if !ok {
		return
	}
	uncordoned := t.setCordoned(cordoned)
	if lifted := t.setNodeTaints(taints); uncordoned || lifted {
		c.Targets.Reopened(t)
	}
}

// readNode reads from the manager's cache of the virtual nodes whether the
// target's is cordoned, and its operator taints. No node is neither; ok is
// false when the node cannot be read.
func (c *Controller) readNode(ctx context.Context, t *Target) (cordoned bool, taints []corev1.Taint, ok bool) {
	node := &corev1.Node{}
	err := c.Client.Get(ctx, client.ObjectKey{Name: t.NodeName}, node)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil, true
	case err != nil:
		klog.FromContext(ctx).Error(err, "Reading the target's virtual node", "node", t.NodeName)
		return false, nil, false
	}
	return node.Spec.Unschedulable, placementpolicy.OperatorTaints(node), true
}
