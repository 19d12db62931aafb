package invitation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// policySettle is how long a new admission policy is given to take effect
// in the API server (it compiles and loads policies in the background)
// before the identity it restrains is granted anything.
const policySettle = 3 * time.Second

// apply makes the identity's admission policy and then its RBAC in the
// given namespaces, and removes RBAC left in namespaces no longer covered.
// While a new policy may not be in force yet, it grants nothing and
// returns how long to wait.
func (c *Controller) apply(ctx context.Context, inv Invitation, namespaces []string) (time.Duration, error) {
	policy := inv.Policy()
	for _, o := range []client.Object{policy, inv.PolicyBinding()} {
		if err := c.upsert(ctx, o); err != nil {
			return 0, err
		}
	}
	created := policy.GetCreationTimestamp()
	if created.IsZero() {
		return policySettle, nil
	}
	if age := c.now().Sub(created.Time); age < policySettle {
		return policySettle - max(age, 0), nil
	}
	objs := []client.Object{inv.ClusterRole(), inv.ClusterRoleBinding()}
	if _, name := inv.ServiceAccount(); name != "" {
		// Any invited ServiceAccount renews its own tokens.
		objs = append(objs, inv.TokenRole(), inv.TokenRoleBinding())
	}
	for _, ns := range namespaces {
		objs = append(objs, inv.Role(ns), inv.RoleBinding(ns), inv.StreamsRoleBinding(ns))
	}
	var errs []error
	for _, o := range objs {
		if err := c.upsert(ctx, o); err != nil {
			errs = append(errs, err)
		}
	}
	if c.streams != nil {
		c.streams.set(inv, namespaces)
	}
	// RBAC in namespaces the invitation no longer covers.
	sel := client.MatchingLabels{protocol.InvitationLabel: inv.ID()}
	roles := &metav1.PartialObjectMetadataList{}
	roles.SetGroupVersionKind(rbacList("RoleBindingList"))
	if err := c.Reader.List(ctx, roles, sel); err != nil {
		errs = append(errs, err)
	}
	saNS, _ := inv.ServiceAccount()
	for _, rb := range roles.Items {
		token := rb.Namespace == saNS && rb.Name == inv.TokenRoleBinding().Name
		if !slices.Contains(namespaces, rb.Namespace) && !token {
			errs = append(errs, c.deleteRBAC(ctx, rb.Namespace, rb.Name))
		}
	}
	return 0, errors.Join(errs...)
}

func rbacList(kind string) schema.GroupVersionKind {
	return rbacv1.SchemeGroupVersion.WithKind(kind)
}

func (c *Controller) deleteRBAC(ctx context.Context, namespace, name string) error {
	var errs []error
	for _, o := range []client.Object{
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
	} {
		if err := c.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// upsert creates obj or replaces the fields we own of an existing one.
func (c *Controller) upsert(ctx context.Context, obj client.Object) error {
	existing := obj.DeepCopyObject().(client.Object)
	err := c.Reader.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	if apierrors.IsNotFound(err) {
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	obj.SetResourceVersion(existing.GetResourceVersion())
	obj.SetCreationTimestamp(existing.GetCreationTimestamp())
	if equalOwned(existing, obj) {
		return nil
	}
	if err := c.Client.Update(ctx, obj); err != nil {
		return fmt.Errorf("updating %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// equalOwned reports whether existing already has what want sets.
func equalOwned(existing, want client.Object) bool {
	if !equality.Semantic.DeepEqual(existing.GetLabels(), want.GetLabels()) {
		return false
	}
	switch w := want.(type) {
	case *rbacv1.Role:
		return equality.Semantic.DeepEqual(existing.(*rbacv1.Role).Rules, w.Rules)
	case *rbacv1.ClusterRole:
		return equality.Semantic.DeepEqual(existing.(*rbacv1.ClusterRole).Rules, w.Rules)
	case *rbacv1.RoleBinding:
		e := existing.(*rbacv1.RoleBinding)
		return e.RoleRef == w.RoleRef && equality.Semantic.DeepEqual(e.Subjects, w.Subjects)
	case *rbacv1.ClusterRoleBinding:
		e := existing.(*rbacv1.ClusterRoleBinding)
		return e.RoleRef == w.RoleRef && equality.Semantic.DeepEqual(e.Subjects, w.Subjects)
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		e := existing.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		return equality.Semantic.DeepDerivative(w.Spec, e.Spec)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		e := existing.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		return equality.Semantic.DeepDerivative(w.Spec, e.Spec)
	}
	return false
}
