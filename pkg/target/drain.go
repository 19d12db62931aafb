package target

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// drain handles a deleted target: no new candidates go there, its waiting
// candidates are deleted, and the pods running there stay mirrored until
// they end; then its virtual node is removed and the finalizer released.
func (c *Controller) drain(ctx context.Context, v view) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(v.obj, Finalizer) {
		c.stop(v.name)
		return reconcile.Result{}, nil
	}
	before := v.status.DeepCopy()
	node := protocol.VirtualNodeName(v.namespace, nameOnly(v.name))
	legacy := protocol.LegacyVirtualNodeName(v.namespace, nameOnly(v.name))
	r := c.get(v.name)
	if r == nil && c.podsOf(v.name, node, legacy) > 0 {
		// The agent started while the target drained: connect to it
		// again, so that the pods that still run there stay mirrored and
		// their delegates go with them.
		cfg, hash, _, err := c.resolve(ctx, &v)
		var t *Target
		if err == nil {
			t, err = c.newTarget(v, cfg)
		}
		if err != nil {
			setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, "Draining", "Connecting again to drain it: "+err.Error())
			return c.report(ctx, v, before, notReadyResync)
		}
		r = c.start(t, hash, placeOf(v, cfg))
	}
	binding := 0
	if r != nil {
		node = r.t.NodeName
		var err error
		if binding, err = c.drainCandidates(ctx, v.name, r); err != nil {
			setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, "Draining", "Deleting the waiting candidates: "+err.Error())
			return c.report(ctx, v, before, notReadyResync)
		}
	}
	if r != nil {
		if err := c.retire(ctx, r); err != nil {
			setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, "Draining", "Serving the pods of the node of the old form: "+err.Error())
			return c.report(ctx, v, before, notReadyResync)
		}
	}
	if n := c.podsOf(v.name, node, legacy) + binding; n > 0 && r != nil {
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, "Draining",
			fmt.Sprintf("Deleted: no new pods go there; %d pods still run there and stay mirrored until they end", n))
		return c.report(ctx, v, before, notReadyResync)
	}
	c.stop(v.name)
	if err := deleteOwnNode(ctx, c.Kube, node, protocol.OwnerOfTargetName(v.name)); err != nil {
		return reconcile.Result{}, fmt.Errorf("deleting virtual node %s of target %s: %w", node, v.name, err)
	}
	patch := client.MergeFrom(v.obj.DeepCopyObject().(client.Object))
	controllerutil.RemoveFinalizer(v.obj, Finalizer)
	if err := c.Client.Patch(ctx, v.obj, patch); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("removing the finalizer of target %s: %w", v.name, err)
	}
	klog.FromContext(ctx).Info("Target removed", "target", v.name, "node", node)
	return reconcile.Result{}, nil
}

// placeOf is where a target's pods run: its cluster (this one, or the
// API server its kubeconfig names) and the namespaces it maps the source's
// to. A new token, CA or label leaves the place as it is.
func placeOf(v view, cfg *rest.Config) string {
	host := ""
	if cfg != nil {
		host = cfg.Host
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00", ClusterOf(v.self, host))
	for _, k := range slices.Sorted(maps.Keys(v.mapping)) {
		fmt.Fprintf(&b, "%s\x00%s\x00", k, v.mapping[k])
	}
	return b.String()
}

// drainOldPlace drains the place a running target pointed to before its
// spec or kubeconfig moved it (another API server, another namespace
// mapping): as for a deleted target, no new pod goes there, its waiting
// candidates are deleted, and the pods that run there stay mirrored by the
// old connection until they end; only then does the target connect to its
// new place. Connecting at once would look for those pods' delegates where
// they are not, report them lost and leave them running in the old place
// (a StatefulSet's pod would then run twice). draining is false once the
// old place holds nothing of this source's.
func (c *Controller) drainOldPlace(ctx context.Context, v view, r *running, before *v1alpha1.TargetStatus) (draining bool, res reconcile.Result, err error) {
	binding, err := c.drainCandidates(ctx, v.name, r)
	if err != nil {
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonRepointing,
			"The target now points to another place; deleting the waiting candidates of the old one: "+err.Error())
		res, err = c.report(ctx, v, before, notReadyResync)
		return true, res, err
	}
	if n := c.podsOf(v.name, r.t.NodeName, protocol.LegacyVirtualNodeName(v.namespace, nameOnly(v.name))) + binding; n > 0 {
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonRepointing,
			fmt.Sprintf("The target now points to another place (API server or namespaces): the old one is drained first; no new pods go to either while %d pods still run in the old one, mirrored until they end", n))
		res, err = c.report(ctx, v, before, notReadyResync)
		return true, res, err
	}
	klog.FromContext(ctx).Info("Target drained of its old place; connecting to the new one", "target", v.name)
	return false, reconcile.Result{}, nil
}

// drainCandidates takes the running target called name out of the set (no
// new pod goes there) and deletes its candidates that run no pod
// (deleteWaiting, whose binding it returns); then the pods elected there
// and not bound may be elected elsewhere, but those whose candidate runs
// there already.
func (c *Controller) drainCandidates(ctx context.Context, name string, r *running) (binding int, err error) {
	c.Targets.Drain(r.t)
	if binding, err = c.deleteWaiting(ctx, r.t); err != nil {
		return 0, err
	}
	c.Targets.MarkDrained(name)
	return binding, nil
}

// deleteWaiting deletes every candidate in t that runs no pod: all but the
// delegates of source pods bound to t's virtual node and the bound
// candidates of source pods elected there and not bound yet (binding, how
// many: the placement controller binds those pods to the virtual node,
// and the drain waits for them as for any pod that runs there).
func (c *Controller) deleteWaiting(ctx context.Context, t *Target) (binding int, err error) {
	if !t.HasSynced() {
		return 0, fmt.Errorf("target %s: candidates not listed yet: %v", t.Name, t.Err())
	}
	var errs []error
	for _, cand := range t.Candidates() {
		if cand.DeletionTimestamp != nil {
			continue
		}
		switch keptOnDrain(cand, c.sourceOf(cand), t) {
		case delegateKept:
			continue
		case bindingKept:
			binding++
			continue
		}
		if err := t.Delete(ctx, cand.Namespace, cand.Name, cand.UID); err != nil {
			errs = append(errs, err)
		}
	}
	return binding, errors.Join(errs...)
}

// sourceOf is the source pod of a candidate, as the source's cache holds
// it; nil when there is none of its UID.
func (c *Controller) sourceOf(cand *corev1.Pod) *corev1.Pod {
	obj, ok, err := c.SourcePods.GetIndexer().GetByKey(SourceKey(cand))
	if err != nil || !ok {
		return nil
	}
	src, ok := obj.(*corev1.Pod)
	if !ok || string(src.UID) != cand.Labels[protocol.SourceUIDLabel] {
		return nil
	}
	return src
}

// drainKeep is why a draining target's candidate stays.
type drainKeep int

const (
	// deleted: it runs no pod.
	deleted drainKeep = iota
	// delegateKept: the delegate of a source pod bound to the target.
	delegateKept
	// bindingKept: bound in the target, its source pod elected there and
	// not bound yet. It is the pod's running copy: the source pod is bound
	// to it, not elected elsewhere beside it.
	bindingKept
)

// keptOnDrain says whether a draining target t's candidate stays, src
// being its source pod (nil when gone).
func keptOnDrain(cand, src *corev1.Pod, t *Target) drainKeep {
	name := t.Name
	switch {
	case src == nil:
		return deleted
	case t.Runs(src):
		// Its virtual node ends it with its source pod.
		return delegateKept
	case src.DeletionTimestamp != nil:
		return deleted
	}
	e, err := protocol.ParseElection(src.Annotations[protocol.ElectionAnnotation])
	if src.Spec.NodeName == "" && cand.Spec.NodeName != "" && err == nil && e.Elected() && e.Target == name {
		return bindingKept
	}
	return deleted
}

// podsOf counts the source pods that run in the target called name, with
// virtual node node and old-form node legacy (runsOn).
func (c *Controller) podsOf(name, node, legacy string) int {
	n := 0
	for _, obj := range c.SourcePods.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok && runsOn(p, name, node, legacy) {
			n++
		}
	}
	return n
}

// ReleaseAll deletes the virtual node of every Target and ClusterTarget and
// releases their finalizers, for an uninstall: the agent is gone, so nobody
// would drain them. Pods bound to the deleted nodes are then removed by the
// cluster's pod garbage collector; delegates in the targets stay until the
// targets revoke the invitation.
func ReleaseAll(ctx context.Context, cl client.Client, kube kubernetes.Interface) error {
	var errs []error
	release := func(obj client.Object, node string) {
		owner := protocol.NodeOwner{Namespace: obj.GetNamespace(), Name: obj.GetName()}
		if err := deleteOwnNode(ctx, kube, node, owner); err != nil {
			errs = append(errs, err)
		}
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		if controllerutil.RemoveFinalizer(obj, Finalizer) {
			if err := cl.Patch(ctx, obj, patch); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	targets := &v1alpha1.TargetList{}
	if err := cl.List(ctx, targets); err != nil {
		return err
	}
	for i := range targets.Items {
		t := &targets.Items[i]
		if err := deleteOwnNode(ctx, kube, protocol.LegacyVirtualNodeName(t.Namespace, t.Name), protocol.NodeOwner{Namespace: t.Namespace, Name: t.Name}); err != nil {
			errs = append(errs, err)
		}
		release(t, protocol.VirtualNodeName(t.Namespace, t.Name))
	}
	clusterTargets := &v1alpha1.ClusterTargetList{}
	if err := cl.List(ctx, clusterTargets); err != nil {
		return err
	}
	for i := range clusterTargets.Items {
		t := &clusterTargets.Items[i]
		release(t, protocol.VirtualNodeName("", t.Name))
	}
	return errors.Join(errs...)
}
