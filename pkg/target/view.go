package target

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

// view is what reconciling needs of a Target or a ClusterTarget.
type view struct {
	obj       client.Object
	name      string // the target's name in the Set
	namespace string // a Target's namespace
	self      bool
	labels    map[string]string
	secret    types.NamespacedName
	secretKey string
	mapping   map[string]string
	podCIDRs  []string
	status    *v1alpha1.TargetStatus
	// secretObj is the kubeconfig Secret as resolve read it.
	secretObj *corev1.Secret
	// summary is the ClusterSummary named by the Secret, if any.
	summary string
	// profile is the ClusterProfile a ClusterTarget names; the Secret
	// then holds only its token (tokenOnly).
	profile   *v1alpha1.ClusterProfileRef
	tokenOnly bool
	// read says where the connection came from, for CredentialsValid.
	read string
}

func targetView(t *v1alpha1.Target) view {
	v := view{
		obj: t, name: t.Namespace + "/" + t.Name, namespace: t.Namespace,
		self: t.Spec.Self, labels: t.Spec.StringMap(), podCIDRs: t.Spec.PodCIDRs, status: &t.Status,
	}
	if ref := t.Spec.KubeconfigSecretRef; ref != nil {
		v.secret, v.secretKey = types.NamespacedName{Namespace: t.Namespace, Name: ref.Name}, ref.Key
	}
	if t.Spec.TargetNamespace != "" {
		v.mapping = map[string]string{t.Namespace: t.Spec.TargetNamespace}
	}
	return v
}

func (c *Controller) clusterTargetView(t *v1alpha1.ClusterTarget) view {
	v := view{obj: t, name: t.Name, self: t.Spec.Self, labels: t.Spec.StringMap(), podCIDRs: t.Spec.PodCIDRs, status: &t.Status}
	if ref := t.Spec.KubeconfigSecretRef; ref != nil {
		ns := ref.Namespace
		if ns == "" {
			ns = c.Namespace
		}
		v.secret, v.secretKey = types.NamespacedName{Namespace: ns, Name: ref.Name}, ref.Key
	}
	if ref := t.Spec.ClusterProfileRef; ref != nil {
		v.profile = ref
		v.tokenOnly = true
		ns, name, key := c.Namespace, ref.Name, "token"
		if tr := ref.TokenSecretRef; tr != nil {
			name = tr.Name
			if tr.Namespace != "" {
				ns = tr.Namespace
			}
			if tr.Key != "" {
				key = tr.Key
			}
		}
		v.secret, v.secretKey = types.NamespacedName{Namespace: ns, Name: name}, key
	}
	if len(t.Spec.NamespaceMapping) > 0 {
		v.mapping = map[string]string{}
		for _, m := range t.Spec.NamespaceMapping {
			v.mapping[m.Source] = m.Target
		}
	}
	return v
}

// refusedSpec says why the agent will not act on a target's spec: a
// namespaced self Target that would send its pods to another namespace
// (with the agent's own identity, which may create pods in every
// namespace: a tenant of one namespace would borrow it to create pods and
// copies of its Secrets in kube-system or a neighbour's namespace), or pod
// networks that do not parse, or, on a namespaced Target (a tenant's),
// networks outside tenantPodCIDRs, the ones the cluster admin lets tenants
// name. The CRD's validation cannot see a Target's namespace, so this is
// checked here. nil: the spec may be acted on.
func refusedSpec(v view, tenantPodCIDRs []netip.Prefix) error {
	if v.self && v.namespace != "" {
		if to := v.mapping[v.namespace]; to != "" && to != v.namespace {
			return fmt.Errorf("a namespaced self Target sends its namespace's pods into this cluster with the agent's own identity, so only into its own namespace: spec.targetNamespace %q must be empty or %q; use a ClusterTarget, which only a cluster admin makes, to map namespaces", to, v.namespace)
		}
	}
	cidrs, err := vnode.ParsePodCIDRs(v.podCIDRs)
	if err != nil {
		return fmt.Errorf("spec.podCIDRs: %w", err)
	}
	if v.namespace != "" {
		for i, p := range cidrs {
			if !within(p, tenantPodCIDRs) {
				return fmt.Errorf("spec.podCIDRs[%d] %s: a namespaced Target's pod networks must lie inside the networks the cluster admin lets tenants name (the agent's targets.tenantPodCIDRs, %s): this cluster's Services would send traffic to any address a tenant's target reported", i, v.podCIDRs[i], describeCIDRs(tenantPodCIDRs))
			}
		}
	}
	return nil
}

// within reports whether network p lies inside one of nets.
func within(p netip.Prefix, nets []netip.Prefix) bool {
	for _, n := range nets {
		if n.Bits() <= p.Bits() && n.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func describeCIDRs(nets []netip.Prefix) string {
	if len(nets) == 0 {
		return "none"
	}
	out := make([]string, len(nets))
	for i, n := range nets {
		out[i] = n.String()
	}
	return strings.Join(out, ", ")
}
