package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// SecretPrefix names the Secret join writes: flotilla-target-<target>.
const SecretPrefix = "flotilla-target-"

type joinOptions struct {
	from           string
	summary        string
	labels         string
	mapping        string
	agentNamespace string
	wait           bool
	timeout        time.Duration
}

func newJoinCommand(kube *kubeFlags) *cobra.Command {
	o := &joinOptions{}
	cmd := &cobra.Command{
		Use:   "join TARGET --kubeconfig-from FILE [flags]",
		Short: "In a source cluster: make TARGET a target, with the file invite wrote",
		Long: `Run in the SOURCE cluster (the one whose pods go to the target).

Reads FILE, the Secret manifest that 'kubectl flotilla invite' wrote in the
target (or a plain kubeconfig), writes its kubeconfig and summary into the
Secret flotilla-target-TARGET in the agent's namespace, and creates or
updates the ClusterTarget TARGET naming that Secret. Then it waits until the
agent reports the target Ready and prints its conditions if it does not.

The kubeconfig must be one the agent accepts: inline certificate data and a
token or client certificate; no exec plugins, auth providers, file paths,
proxies or insecure-skip-tls-verify.

The source's agent must run with clusterName equal to the name the target
invited (invite's SOURCE): the target admits only candidates labelled so.

Running join again replaces the Secret's content (a new invitation file) and
the labels and namespace mapping given; labels and mapping not given are
kept.`,
		Example: `  # Join target t1 with the file its invitation wrote:
  kubectl --context c1 flotilla join t1 --kubeconfig-from t1.yaml --labels topology.kubernetes.io/region=eu-west

  # Pods of namespace shop go to namespace shop-c1 in t1:
  kubectl flotilla join t1 --kubeconfig-from t1.yaml --namespace-mapping shop=shop-c1

  # A kubeconfig written by hand for an existing identity, with the invitation's summary:
  kubectl flotilla join t1 --kubeconfig-from t1.kubeconfig --summary flotilla-clustersource.c1`,
		Args: exactArgs("TARGET (the name this cluster gives the target)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.from == "" {
				return usageErrorf("--kubeconfig-from FILE is required: the file 'kubectl flotilla invite' wrote in the target")
			}
			var labels map[string]v1alpha1.LabelValue
			var mapping []v1alpha1.NamespaceMapping
			var err error
			if changed(cmd.Flags(), "labels") {
				if labels, err = parseLabels(o.labels); err != nil {
					return err
				}
			}
			if changed(cmd.Flags(), "namespace-mapping") {
				if mapping, err = parseMapping(o.mapping); err != nil {
					return err
				}
			}
			spec := joinSpec{
				labels: labels, setLabels: changed(cmd.Flags(), "labels"),
				mapping: mapping, setMapping: changed(cmd.Flags(), "namespace-mapping"),
			}
			return runJoin(cmd.Context(), kube, o, args[0], spec, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.from, "kubeconfig-from", "", "The file 'kubectl flotilla invite' wrote (a Secret manifest), or a kubeconfig for the target. Required.")
	fs.StringVar(&o.summary, "summary", "", "Name of the invitation's ClusterSummary in the target, for a kubeconfig without one (the invitation's status.summary).")
	fs.StringVar(&o.labels, "labels", "", "Labels of the target's virtual node, e.g. topology.kubernetes.io/region=eu-west,topology.kubernetes.io/zone=eu-west-1a.")
	fs.StringVar(&o.mapping, "namespace-mapping", "", "Comma-separated SOURCE=TARGET namespaces: pods of SOURCE run in TARGET of the target cluster.")
	fs.StringVar(&o.agentNamespace, "agent-namespace", DefaultAgentNamespace, "Namespace of Flotilla's agent in this cluster, where the kubeconfig Secret is written.")
	fs.BoolVar(&o.wait, "wait", true, "Wait until the agent reports the target Ready.")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "How long to wait for the target to be Ready.")
	return cmd
}

type joinSpec struct {
	labels     map[string]v1alpha1.LabelValue
	setLabels  bool
	mapping    []v1alpha1.NamespaceMapping
	setMapping bool
}

// invitationFile is what join takes from FILE.
type invitationFile struct {
	kubeconfig []byte
	summary    string
}

// readInvitation reads the Secret manifest invite writes (data or
// stringData) or a plain kubeconfig, and checks that the source's agent
// would accept the kubeconfig.
func readInvitation(data []byte) (invitationFile, error) {
	var head struct {
		Kind     string `json:"kind"`
		Clusters any    `json:"clusters"`
	}
	raw, err := yaml.YAMLToJSON(data)
	if err != nil {
		return invitationFile{}, fmt.Errorf("not YAML or JSON: %w", err)
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return invitationFile{}, errors.New("neither the Secret manifest that 'kubectl flotilla invite' writes nor a kubeconfig")
	}
	var f invitationFile
	switch {
	case head.Kind == "Secret":
		secret := &corev1.Secret{}
		if err := json.Unmarshal(raw, secret); err != nil {
			return f, fmt.Errorf("reading the Secret: %w", err)
		}
		get := func(key string) ([]byte, bool) {
			if v, ok := secret.StringData[key]; ok {
				return []byte(v), true
			}
			v, ok := secret.Data[key]
			return v, ok
		}
		kc, ok := get(protocol.InvitationKubeconfigKey)
		if !ok || len(kc) == 0 {
			return f, fmt.Errorf("the Secret has no key %q: use the file 'kubectl flotilla invite' wrote", protocol.InvitationKubeconfigKey)
		}
		f.kubeconfig = kc
		if s, ok := get(protocol.InvitationSummaryKey); ok {
			f.summary = strings.TrimSpace(string(s))
		}
	case head.Kind == "Config" || head.Clusters != nil:
		f.kubeconfig = data
	default:
		return f, fmt.Errorf("kind %q: want the Secret manifest that 'kubectl flotilla invite' writes, or a kubeconfig", head.Kind)
	}
	if _, err := kubeconfig.RESTConfig(f.kubeconfig); err != nil {
		return f, fmt.Errorf("the source's agent would not use its kubeconfig: %w", err)
	}
	return f, nil
}

func runJoin(ctx context.Context, kube *kubeFlags, o *joinOptions, name string, spec joinSpec, stdout, stderr io.Writer) error {
	data, err := os.ReadFile(o.from)
	if err != nil {
		return fmt.Errorf("reading --kubeconfig-from: %w", err)
	}
	f, err := readInvitation(data)
	if err != nil {
		return fmt.Errorf("%s: %w", o.from, err)
	}
	if o.summary != "" {
		f.summary = o.summary
	}
	if f.summary == "" {
		fmt.Fprintf(stderr, "Warning: %s names no ClusterSummary: the source will treat every namespace as invited and needs to list pods cluster-wide in the target (see --summary).\n", o.from)
	}
	c, err := kube.clients()
	if err != nil {
		return err
	}
	secretName := SecretPrefix + name
	if err := writeTargetSecret(ctx, c, o.agentNamespace, secretName, f); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "Secret %s/%s written in %s.\n", o.agentNamespace, secretName, c.where)

	ct, err := applyClusterTarget(ctx, c, name, o.agentNamespace, secretName, spec, stderr)
	if err != nil {
		return err
	}
	if !o.wait {
		return nil
	}
	fmt.Fprintf(stderr, "Waiting up to %s for the agent to connect...\n", o.timeout)
	p := &progress{w: stderr}
	err = waitUntil(ctx, o.timeout, func(ctx context.Context) (bool, error) {
		if err := c.cr.Get(ctx, client.ObjectKey{Name: name}, ct); err != nil {
			return false, c.explainAPIError(err, "reading ClusterTarget "+name)
		}
		ready := readyCondition(ct.Status.Conditions, ct.Status.ObservedGeneration, ct.Generation)
		p.report(ready)
		return ready != nil && ready.Status == metav1.ConditionTrue, nil
	})
	if errors.Is(err, errNotYet) {
		if len(ct.Status.Conditions) == 0 {
			return fmt.Errorf("ClusterTarget %s has no status after %s: is the Flotilla agent running in %s? (kubectl -n %s get pods)", name, o.timeout, c.where, o.agentNamespace)
		}
		fmt.Fprintf(stderr, "ClusterTarget %s is not Ready after %s:\n", name, o.timeout)
		writeConditions(stderr, ct.Status.Conditions)
		if r := readyCondition(ct.Status.Conditions, 0, 0); r != nil && hint(r.Reason) != "" {
			return fmt.Errorf("ClusterTarget %s is not Ready (%s): %s", name, r.Reason, hint(r.Reason))
		}
		return fmt.Errorf("ClusterTarget %s is not Ready: see its conditions above and the agent's log", name)
	}
	if err != nil {
		return err
	}
	namespaces := "every namespace (the kubeconfig names no ClusterSummary)"
	if len(ct.Status.Namespaces) > 0 {
		namespaces = strings.Join(ct.Status.Namespaces, ", ")
	}
	fmt.Fprintf(stdout, "ClusterTarget %s is Ready: virtual node %s; invited namespaces: %s.\n", name, ct.Status.VirtualNode, namespaces)
	return nil
}

// writeTargetSecret creates or replaces the kubeconfig Secret; it keeps
// only the keys join writes.
func writeTargetSecret(ctx context.Context, c *clients, namespace, name string, f invitationFile) error {
	data := map[string][]byte{protocol.InvitationKubeconfigKey: f.kubeconfig}
	if f.summary != "" {
		data[protocol.InvitationSummaryKey] = []byte(f.summary)
	}
	secrets := c.kube.CoreV1().Secrets(namespace)
	existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "kubectl-flotilla"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       data,
		}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("creating Secret %s/%s in %s: namespace %s does not exist: is the Flotilla agent installed there? Name its namespace with --agent-namespace: %w", namespace, name, c.where, namespace, err)
			}
			return c.explainAPIError(err, fmt.Sprintf("creating Secret %s/%s", namespace, name))
		}
		return nil
	case err != nil:
		return c.explainAPIError(err, fmt.Sprintf("reading Secret %s/%s", namespace, name))
	}
	existing.Data = data
	existing.StringData = nil
	if _, err := secrets.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
		return c.explainAPIError(err, fmt.Sprintf("updating Secret %s/%s", namespace, name))
	}
	return nil
}

// applyClusterTarget creates the ClusterTarget or points an existing one at
// the Secret, with the labels and mapping given.
func applyClusterTarget(ctx context.Context, c *clients, name, secretNS, secretName string, spec joinSpec, stderr io.Writer) (*v1alpha1.ClusterTarget, error) {
	ref := &v1alpha1.SecretKeyRef{
		LocalSecretKeyRef: v1alpha1.LocalSecretKeyRef{Name: secretName, Key: protocol.InvitationKubeconfigKey},
		Namespace:         secretNS,
	}
	ct := &v1alpha1.ClusterTarget{}
	err := c.cr.Get(ctx, client.ObjectKey{Name: name}, ct)
	switch {
	case apierrors.IsNotFound(err) && !notInstalled(err):
		ct = &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name}}
		ct.Spec.KubeconfigSecretRef = ref
		ct.Spec.Labels = spec.labels
		ct.Spec.NamespaceMapping = spec.mapping
		if err := c.cr.Create(ctx, ct); err != nil {
			return nil, c.explainAPIError(err, "creating ClusterTarget "+name)
		}
		fmt.Fprintf(stderr, "ClusterTarget %s created in %s.\n", name, c.where)
		return ct, nil
	case err != nil:
		return nil, c.explainAPIError(err, "reading ClusterTarget "+name)
	}
	if ct.DeletionTimestamp != nil {
		return nil, fmt.Errorf("ClusterTarget %s is being deleted (draining its pods) in %s: wait until it is gone, or join under another name", name, c.where)
	}
	if ct.Spec.Self {
		return nil, fmt.Errorf("ClusterTarget %s is this cluster's self target: join the other cluster under another name", name)
	}
	ct.Spec.KubeconfigSecretRef = ref
	if spec.setLabels {
		ct.Spec.Labels = spec.labels
	}
	if spec.setMapping {
		ct.Spec.NamespaceMapping = spec.mapping
	}
	if err := c.cr.Update(ctx, ct); err != nil {
		return nil, c.explainAPIError(err, "updating ClusterTarget "+name)
	}
	fmt.Fprintf(stderr, "ClusterTarget %s updated in %s.\n", name, c.where)
	return ct, nil
}
