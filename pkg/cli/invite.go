package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

type inviteOptions struct {
	namespaces        string
	namespaceSelector string
	createNamespaces  bool
	quota             string
	user              string
	serviceAccount    string
	allowPrivileged   bool
	namespaced        bool
	output            string
	timeout           time.Duration
}

func newInviteCommand(kube *kubeFlags) *cobra.Command {
	o := &inviteOptions{}
	cmd := &cobra.Command{
		Use:   "invite SOURCE (--namespaces NS,... | --namespace-selector SELECTOR | -n NS --namespaced) [flags]",
		Short: "In a target cluster: invite source cluster SOURCE and write the file that join reads",
		Long: `Run in the TARGET cluster (the one that will run the source's pods).

Creates (or updates) the ClusterSource SOURCE, inviting source cluster SOURCE
(its agent's clusterName) into the given namespaces, waits until the
target's agent has granted it access, and prints the kubeconfig Secret that
the agent wrote for it as a Secret manifest. Take that file to the source
cluster and run 'kubectl flotilla join' there, then delete it: it holds a
credential (a token of the invited ServiceAccount, renewed by the source from
then on).

By default the target's agent creates a ServiceAccount for the source
(flotilla-source-SOURCE in the agent's namespace). With --user or
--service-account an identity that exists already is invited: the agent
writes no kubeconfig for it, so the command prints nothing but what to do.

With --namespaced, a namespaced Source is created instead, in --namespace
(default: the context's namespace): it invites the source into that
namespace only and needs rights there alone.

Running invite again for the same SOURCE updates the invitation and prints
the current kubeconfig again (for example when the source's token expired).`,
		Example: `  # Invite source c1 into namespace shop, creating it here if missing:
  kubectl --context t1 flotilla invite c1 --namespaces shop --create-namespaces -o t1.yaml

  # Invite into every namespace labelled team=web, with a (not yet enforced) quota:
  kubectl flotilla invite c1 --namespace-selector team=web --quota cpu=8,memory=32Gi,pods=100

  # A namespace owner invites c1 into their own namespace:
  kubectl flotilla invite c1 -n shop --namespaced -o t1.yaml`,
		Args: exactArgs("SOURCE (the source cluster's name)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInvite(cmd.Context(), kube, o, args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.namespaces, "namespaces", "", "Comma-separated namespaces the source is invited into (existing or not).")
	fs.StringVar(&o.namespaceSelector, "namespace-selector", "", "Label selector (e.g. team=web) of the existing namespaces the source is invited into, instead of --namespaces.")
	fs.BoolVar(&o.createNamespaces, "create-namespaces", false, "Let the target's agent create invited namespaces that do not exist.")
	fs.StringVar(&o.quota, "quota", "", "What the source's pods may hold at once, e.g. cpu=8,memory=32Gi,pods=100 (validated, not enforced yet).")
	fs.StringVar(&o.user, "user", "", "Invite this existing user (as this cluster authenticates it) instead of a ServiceAccount the agent creates.")
	fs.StringVar(&o.serviceAccount, "service-account", "", "Invite this existing ServiceAccount, NAMESPACE/NAME, instead of one the agent creates.")
	fs.BoolVar(&o.allowPrivileged, "allow-privileged", false, "Allow the source's pods to be privileged, use hostPath volumes or the host's namespaces.")
	fs.BoolVar(&o.namespaced, "namespaced", false, "Create a namespaced Source in --namespace instead of a ClusterSource.")
	fs.StringVarP(&o.output, "output", "o", "", "Write the Secret manifest to this file (mode 0600) instead of standard output.")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "How long to wait for the target's agent to grant the invitation.")
	return cmd
}

// buildInvitation turns the command line into a Source or ClusterSource.
func buildInvitation(name, namespace string, o *inviteOptions) (client.Object, error) {
	common := v1alpha1.SourceCommon{
		ClusterName:      name,
		CreateNamespaces: o.createNamespaces,
		AllowPrivileged:  o.allowPrivileged,
	}
	switch {
	case o.user != "" && o.serviceAccount != "":
		return nil, usageErrorf("--user and --service-account exclude each other")
	case o.user != "":
		common.Identity.User = o.user
	case o.serviceAccount != "":
		sa, err := parseServiceAccount(o.serviceAccount)
		if err != nil {
			return nil, err
		}
		common.Identity.ServiceAccount = sa
	default:
		common.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	}
	quota, err := parseQuota(o.quota)
	if err != nil {
		return nil, err
	}
	common.Quota = quota

	if o.namespaced {
		if o.namespaces != "" || o.namespaceSelector != "" {
			return nil, usageErrorf("--namespaced invites into --namespace alone: drop --namespaces and --namespace-selector")
		}
		return &v1alpha1.Source{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec:       v1alpha1.SourceSpec{SourceCommon: common},
		}, nil
	}
	cs := &v1alpha1.ClusterSource{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.ClusterSourceSpec{SourceCommon: common},
	}
	switch {
	case o.namespaces != "" && o.namespaceSelector != "":
		return nil, usageErrorf("--namespaces and --namespace-selector exclude each other")
	case o.namespaces != "":
		cs.Spec.Namespaces = splitList(o.namespaces)
	case o.namespaceSelector != "":
		sel, err := metav1.ParseToLabelSelector(o.namespaceSelector)
		if err != nil {
			return nil, usageErrorf("--namespace-selector: %v", err)
		}
		cs.Spec.NamespaceSelector = sel
	default:
		return nil, usageErrorf("say where the source may run pods: --namespaces NS,..., --namespace-selector SELECTOR, or -n NS --namespaced")
	}
	return cs, nil
}

func runInvite(ctx context.Context, kube *kubeFlags, o *inviteOptions, name string, stdout, stderr io.Writer) error {
	want, err := buildInvitation(name, kube.namespace, o)
	if err != nil {
		return err
	}
	c, err := kube.clients()
	if err != nil {
		return err
	}
	if want.GetNamespace() == "" && o.namespaced {
		want.SetNamespace(c.namespace)
	}
	kind := kindOf(want)
	if err := applyInvitation(ctx, c, want, stderr); err != nil {
		return err
	}

	fmt.Fprintf(stderr, "Waiting up to %s for the agent to grant it...\n", o.timeout)
	managed := inviteIdentity(want).ManagedServiceAccount != nil
	var status v1alpha1.SourceStatus
	p := &progress{w: stderr}
	err = waitUntil(ctx, o.timeout, func(ctx context.Context) (bool, error) {
		got := want.DeepCopyObject().(client.Object)
		if err := c.cr.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
			return false, c.explainAPIError(err, "reading "+kind+" "+name)
		}
		status = *sourceStatus(got)
		ready := readyCondition(status.Conditions, status.ObservedGeneration, got.GetGeneration())
		p.report(ready)
		return ready != nil && ready.Status == metav1.ConditionTrue && (!managed || status.KubeconfigSecret != ""), nil
	})
	if errors.Is(err, errNotYet) {
		if len(status.Conditions) == 0 {
			return fmt.Errorf("%s %s has no status after %s: is the Flotilla agent running in %s? (kubectl -n %s get pods)", kind, name, o.timeout, c.where, DefaultAgentNamespace)
		}
		fmt.Fprintf(stderr, "%s %s is not Ready after %s:\n", kind, name, o.timeout)
		writeConditions(stderr, status.Conditions)
		if r := readyCondition(status.Conditions, 0, 0); r != nil && hint(r.Reason) != "" {
			return fmt.Errorf("%s %s is not Ready (%s): %s", kind, name, r.Reason, hint(r.Reason))
		}
		return fmt.Errorf("%s %s is not Ready: see its conditions above and the agent's log", kind, name)
	}
	if err != nil {
		return err
	}
	if !managed {
		fmt.Fprintf(stderr, `%s %s is Ready: %s may send candidates to namespaces %s.
The agent writes no kubeconfig for an identity that exists already. Write one
for it (inline data, a token or client certificate), then in the source run:
  kubectl flotilla join TARGET --kubeconfig-from KUBECONFIG --summary %s
`, kind, name, identityName(inviteIdentity(want)), strings.Join(status.Namespaces, ","), status.Summary)
		return nil
	}

	secretNS, _, _ := strings.Cut(status.ServiceAccount, "/")
	secret, err := c.kube.CoreV1().Secrets(secretNS).Get(ctx, status.KubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		return c.explainAPIError(err, fmt.Sprintf("reading the invitation's kubeconfig Secret %s/%s", secretNS, status.KubeconfigSecret))
	}
	manifest, err := invitationManifest(secret, name, c.where)
	if err != nil {
		return err
	}
	if o.output == "" {
		_, err := stdout.Write(manifest)
		return err
	}
	if err := os.WriteFile(o.output, manifest, 0o600); err != nil {
		return fmt.Errorf("writing the invitation: %w", err)
	}
	// WriteFile keeps the mode of a file that existed.
	if err := os.Chmod(o.output, 0o600); err != nil {
		return fmt.Errorf("writing the invitation: %w", err)
	}
	fmt.Fprintf(stderr, "Wrote %s. In the source cluster run:\n  kubectl flotilla join TARGET --kubeconfig-from %s\nthen delete the file: it holds a credential.\n", o.output, o.output)
	return nil
}

// applyInvitation creates the invitation, or updates the spec of an
// existing one to want's.
func applyInvitation(ctx context.Context, c *clients, want client.Object, stderr io.Writer) error {
	kind, name := kindOf(want), refOf(want)
	got := want.DeepCopyObject().(client.Object)
	err := c.cr.Get(ctx, client.ObjectKeyFromObject(want), got)
	switch {
	case apierrors.IsNotFound(err) && !notInstalled(err):
		if err := c.cr.Create(ctx, want); err != nil {
			return c.explainAPIError(err, "creating "+kind+" "+name)
		}
		fmt.Fprintf(stderr, "%s %s created in %s.\n", kind, name, c.where)
		return nil
	case err != nil:
		return c.explainAPIError(err, "reading "+kind+" "+name)
	}
	if got.GetDeletionTimestamp() != nil {
		return fmt.Errorf("%s %s is being deleted (revoked) in %s: wait until it is gone, then invite again", kind, name, c.where)
	}
	if equality.Semantic.DeepEqual(specOf(got), specOf(want)) {
		fmt.Fprintf(stderr, "%s %s exists in %s, unchanged.\n", kind, name, c.where)
		return nil
	}
	setSpec(got, want)
	if err := c.cr.Update(ctx, got); err != nil {
		return c.explainAPIError(err, "updating "+kind+" "+name)
	}
	want.SetGeneration(got.GetGeneration())
	fmt.Fprintf(stderr, "%s %s updated in %s.\n", kind, name, c.where)
	return nil
}

func kindOf(obj client.Object) string {
	if _, ok := obj.(*v1alpha1.Source); ok {
		return "Source"
	}
	return "ClusterSource"
}

func refOf(obj client.Object) string {
	if obj.GetNamespace() != "" {
		return obj.GetNamespace() + "/" + obj.GetName()
	}
	return obj.GetName()
}

func specOf(obj client.Object) any {
	switch o := obj.(type) {
	case *v1alpha1.Source:
		return o.Spec
	case *v1alpha1.ClusterSource:
		return o.Spec
	}
	return nil
}

func setSpec(dst, src client.Object) {
	switch d := dst.(type) {
	case *v1alpha1.Source:
		d.Spec = src.(*v1alpha1.Source).Spec
	case *v1alpha1.ClusterSource:
		d.Spec = src.(*v1alpha1.ClusterSource).Spec
	}
}

func sourceStatus(obj client.Object) *v1alpha1.SourceStatus {
	switch o := obj.(type) {
	case *v1alpha1.Source:
		return &o.Status
	case *v1alpha1.ClusterSource:
		return &o.Status
	}
	return &v1alpha1.SourceStatus{}
}

func inviteIdentity(obj client.Object) v1alpha1.SourceIdentity {
	switch o := obj.(type) {
	case *v1alpha1.Source:
		return o.Spec.Identity
	case *v1alpha1.ClusterSource:
		return o.Spec.Identity
	}
	return v1alpha1.SourceIdentity{}
}

func identityName(id v1alpha1.SourceIdentity) string {
	switch {
	case id.User != "":
		return "user " + id.User
	case id.ServiceAccount != nil:
		return "ServiceAccount " + id.ServiceAccount.Namespace + "/" + id.ServiceAccount.Name
	}
	return "the managed ServiceAccount"
}

// invitationManifest renders the kubeconfig Secret of an invitation as the
// manifest join reads: its two keys and the token's expiry, nothing of the
// target's object (namespace, uid, resourceVersion).
func invitationManifest(secret *corev1.Secret, source, target string) ([]byte, error) {
	if len(secret.Data[protocol.InvitationKubeconfigKey]) == 0 {
		return nil, fmt.Errorf("Secret %s/%s has no key %q: the target's agent has not written it yet; run invite again", secret.Namespace, secret.Name, protocol.InvitationKubeconfigKey)
	}
	out := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: secret.Name},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{},
	}
	for _, k := range []string{protocol.InvitationKubeconfigKey, protocol.InvitationSummaryKey} {
		if v, ok := secret.Data[k]; ok {
			out.Data[k] = v
		}
	}
	expires := ""
	if v, ok := secret.Annotations[protocol.InvitationExpiresAnnotation]; ok {
		out.Annotations = map[string]string{protocol.InvitationExpiresAnnotation: v}
		expires = " (its token expires " + v + "; the source renews it once joined)"
	}
	body, err := yaml.Marshal(out)
	if err != nil {
		return nil, err
	}
	header := fmt.Sprintf(`# Flotilla: the invitation of source cluster %s by target cluster %s.
# In the source cluster run: kubectl flotilla join TARGET --kubeconfig-from FILE
# It holds a credential%s: keep it secret and delete it once joined.
`, source, target, expires)
	return append([]byte(header), body...), nil
}
