package invitation

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// revoke removes everything the invitation granted and the source's
// candidates that wait; bound ones run on.
func (c *Controller) revoke(ctx context.Context, inv Invitation) error {
	log := klog.FromContext(ctx)
	var errs []error
	if c.streams != nil {
		// No streams Role is written again once deleted below.
		c.streams.forget(inv.ID())
	}
	if c.Summaries != nil {
		c.Summaries.Remove(inv.SummaryName())
	} else if err := c.Client.Delete(ctx, &v1alpha1.ClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: inv.SummaryName()}}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	del := func(o client.Object) {
		if err := c.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	// The identity first: deleting the ServiceAccount invalidates its tokens.
	if inv.Spec.Identity.ManagedServiceAccount != nil {
		ns, name := inv.ServiceAccount()
		del(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		del(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: inv.KubeconfigSecretName()}})
	}
	if _, name := inv.ServiceAccount(); name != "" {
		del(inv.TokenRoleBinding())
		del(inv.TokenRole())
	}
	del(inv.ClusterRoleBinding())
	del(inv.ClusterRole())
	del(inv.PolicyBinding())
	del(inv.Policy())
	rbs := &metav1.PartialObjectMetadataList{}
	rbs.SetGroupVersionKind(rbacList("RoleBindingList"))
	if err := c.Reader.List(ctx, rbs, client.MatchingLabels{protocol.InvitationLabel: inv.ID()}); err != nil {
		errs = append(errs, err)
	}
	for _, rb := range rbs.Items {
		errs = append(errs, c.deleteRBAC(ctx, rb.Namespace, rb.Name))
	}
	sel := labels.SelectorFromSet(labels.Set{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: inv.Spec.ClusterName}).String()
	for _, ns := range inv.Namespaces {
		pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel, FieldSelector: "spec.nodeName="})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range pods.Items {
			uid := p.UID
			err := c.Kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("revoking invitation %s: %w", inv.Ref(), err)
	}
	log.Info("Invitation revoked", "invitation", inv.Ref(), "identity", inv.Username())
	return nil
}

// RevokeAll revokes every invitation and releases its finalizer, for an
// uninstall: afterwards nothing the agent made for a source is left and the
// Sources and ClusterSources can be deleted without the agent.
func (c *Controller) RevokeAll(ctx context.Context) error {
	var errs []error
	sources := &v1alpha1.SourceList{}
	if err := c.Client.List(ctx, sources); err != nil {
		return err
	}
	for i := range sources.Items {
		src := &sources.Items[i]
		inv := Invitation{Kind: "Source", Namespace: src.Namespace, Name: src.Name, Spec: src.Spec.SourceCommon,
			Namespaces: []string{src.Namespace}, AgentNamespace: c.AgentNamespace}
		errs = append(errs, c.revokeAndRelease(ctx, src, inv))
	}
	clusterSources := &v1alpha1.ClusterSourceList{}
	if err := c.Client.List(ctx, clusterSources); err != nil {
		return err
	}
	for i := range clusterSources.Items {
		cs := &clusterSources.Items[i]
		inv := Invitation{Kind: "ClusterSource", Name: cs.Name, Spec: cs.Spec.SourceCommon, AgentNamespace: c.AgentNamespace}
		ns, err := c.namespacesOf(ctx, cs)
		if err != nil {
			errs = append(errs, err)
		}
		inv.Namespaces = ns
		errs = append(errs, c.revokeAndRelease(ctx, cs, inv))
	}
	errs = append(errs, sweeper{c}.sweep(ctx))
	return errors.Join(errs...)
}

func (c *Controller) revokeAndRelease(ctx context.Context, obj client.Object, inv Invitation) error {
	if err := c.revoke(ctx, inv); err != nil {
		return err
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	if controllerutil.RemoveFinalizer(obj, Finalizer) {
		return client.IgnoreNotFound(c.Client.Patch(ctx, obj, patch))
	}
	return nil
}
