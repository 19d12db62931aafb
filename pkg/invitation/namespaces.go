package invitation

import (
	"context"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// namespacesOf resolves the namespaces a ClusterSource covers: the listed
// ones (existing or not), or the existing ones its selector matches.
func (c *Controller) namespacesOf(ctx context.Context, cs *v1alpha1.ClusterSource) ([]string, error) {
	if cs.Spec.NamespaceSelector == nil {
		out := slices.Clone(cs.Spec.Namespaces)
		sort.Strings(out)
		return out, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(cs.Spec.NamespaceSelector)
	if err != nil {
		return nil, fmt.Errorf("spec.namespaceSelector: %w", err)
	}
	list := &corev1.NamespaceList{}
	if err := c.Client.List(ctx, list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range list.Items {
		if ns.DeletionTimestamp == nil {
			out = append(out, ns.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ensureNamespaces creates the missing invited namespaces when allowed, and
// returns those still missing.
func (c *Controller) ensureNamespaces(ctx context.Context, inv Invitation) ([]string, error) {
	var missing []string
	for _, name := range inv.Namespaces {
		ns := &corev1.Namespace{}
		err := c.Client.Get(ctx, client.ObjectKey{Name: name}, ns)
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		if !inv.Spec.CreateNamespaces {
			missing = append(missing, name)
			continue
		}
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: podSecurityLabels(inv, map[string]string{
			protocol.ManagedNamespaceLabel: inv.ID(), "app.kubernetes.io/managed-by": "flotilla",
		})}}
		if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating invited namespace %s: %w", name, err)
		}
	}
	return missing, nil
}

// podSecurityLabels adds to labels those that make Pod Security Admission
// enforce, in a namespace created for an invitation, what the invitation's
// policy enforces on the source (baseline, or privileged when the
// invitation allows it) on every pod there, whoever creates it, and audit
// at restricted: what a pod there would need to change to meet it, in the
// audit log. Not warn: the warning would come back to the source's agent
// with every candidate it creates. The version is latest: the standards
// of the API server that runs.
func podSecurityLabels(inv Invitation, labels map[string]string) map[string]string {
	enforce := "baseline"
	if inv.Spec.AllowPrivileged {
		enforce = "privileged"
	}
	const psa = "pod-security.kubernetes.io/"
	labels[psa+"enforce"] = enforce
	labels[psa+"enforce-version"] = "latest"
	labels[psa+"audit"] = "restricted"
	labels[psa+"audit-version"] = "latest"
	return labels
}

func present(all, missing []string) []string {
	var out []string
	for _, ns := range all {
		if !slices.Contains(missing, ns) {
			out = append(out, ns)
		}
	}
	return out
}
