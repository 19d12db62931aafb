package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func newMigrateCommand(kube *kubeFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate SYSTEM",
		Short: "Turn another multi-cluster scheduler's objects into Flotilla's",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("migrate knows no system %q: kubectl flotilla migrate admiralty", args[0])
			}
			return usageErrorf("name the system to migrate from: kubectl flotilla migrate admiralty")
		},
	}
	cmd.AddCommand(newMigrateAdmiraltyCommand(kube))
	return cmd
}

type migrateAdmiraltyFlags struct {
	apply             bool
	agentNamespace    string
	namespaces        string
	namespaceSelector string
}

func newMigrateAdmiraltyCommand(kube *kubeFlags) *cobra.Command {
	o := &migrateAdmiraltyFlags{}
	cmd := &cobra.Command{
		Use:   "admiralty [--apply] [flags]",
		Short: "Turn this cluster's Admiralty targets and sources into Flotilla's",
		Long: `Run in every cluster where Admiralty runs, with the Flotilla chart installed.

Reads Admiralty's Targets and ClusterTargets (this cluster as a source),
Sources and ClusterSources (this cluster as a target), and prints the
Flotilla objects they map to as YAML, then, on standard error, what each
became, what could not be mapped and why, and what to run:

  Target, ClusterTarget     -> Target, ClusterTarget of the same name; self
                               stays self; a kubeconfig Secret is copied into
                               Secret flotilla-target-NAME if Flotilla's agent
                               would accept it (no exec plugins, no files...)
  Source, ClusterSource     -> Source, ClusterSource of the same name, whose
                               clusterName is that name, inviting the same
                               ServiceAccount or user

It also lists the namespaces labelled multicluster-scheduler=enabled, the
workloads and pods annotated multicluster.admiralty.io/elect, Admiralty's
virtual nodes and the Services its service reroute rewrote, each with the
command that moves it to Flotilla. It changes none of them.

With --apply it creates the Flotilla objects (a Secret's kubeconfig is not
printed without it) and reports what it did with each: created, unchanged,
or left as it is when an object of that name exists with another spec.
Running it again changes nothing. Admiralty's objects are never changed or
deleted.`,
		Example: `  # Review what would be created:
  kubectl --context c1 flotilla migrate admiralty

  # In a target, inviting the sources of Admiralty's ClusterSources into two namespaces:
  kubectl --context t1 flotilla migrate admiralty --namespaces shop,web --apply`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := migrateAdmiraltyOptions{AgentNamespace: o.agentNamespace}
			switch {
			case o.namespaces != "" && o.namespaceSelector != "":
				return usageErrorf("--namespaces and --namespace-selector exclude each other")
			case o.namespaces != "":
				opts.InviteNamespaces = splitList(o.namespaces)
			case o.namespaceSelector != "":
				sel, err := metav1.ParseToLabelSelector(o.namespaceSelector)
				if err != nil {
					return usageErrorf("--namespace-selector: %v", err)
				}
				opts.InviteSelector = sel
			}
			return runMigrateAdmiralty(cmd.Context(), kube, o.apply, opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&o.apply, "apply", false, "Create the Flotilla objects; without it they are only printed.")
	fs.StringVar(&o.agentNamespace, "agent-namespace", DefaultAgentNamespace, "Namespace of Flotilla's agent in this cluster, where a ClusterTarget's kubeconfig Secret is written.")
	fs.StringVar(&o.namespaces, "namespaces", "", "Comma-separated namespaces that each migrated ClusterSource invites its source into.")
	fs.StringVar(&o.namespaceSelector, "namespace-selector", "", "Label selector of the namespaces that each migrated ClusterSource invites its source into, instead of --namespaces.")
	return cmd
}

func runMigrateAdmiralty(ctx context.Context, kube *kubeFlags, apply bool, o migrateAdmiraltyOptions, stdout, stderr io.Writer) error {
	c, err := kube.clients()
	if err != nil {
		return err
	}
	st, missing, err := readAdmiralty(ctx, c)
	if err != nil {
		return err
	}
	if len(missing) == len(admiraltyResources) {
		fmt.Fprintf(stderr, "Admiralty's CRDs are not installed in %s: no targets or sources to migrate.\n", c.where)
	}
	m := convertAdmiralty(st, o)
	if !apply {
		if err := writeMigrationYAML(stdout, m.Objects); err != nil {
			return err
		}
		writeFindings(stderr, m.Findings)
		if len(m.Objects) > 0 {
			fmt.Fprintf(stderr, "\nNothing was changed. Review the above, then run again with --apply.\n")
		}
		return nil
	}
	writeFindings(stderr, m.Findings)
	var errs []error
	for _, obj := range m.Objects {
		// Named before it is written: the client's answer replaces the
		// object, kind included.
		name := describe(obj)
		what, err := applyMigrated(ctx, c, obj)
		if err != nil {
			errs = append(errs, err)
			fmt.Fprintf(stdout, "%s: failed: %v\n", name, err)
			continue
		}
		fmt.Fprintf(stdout, "%s: %s\n", name, what)
	}
	return errors.Join(errs...)
}

// readAdmiralty reads what migrate converts: Admiralty's objects, the
// Secrets they name, and what is opted in to Admiralty. missing lists the
// kinds whose CRD is not installed.
func readAdmiralty(ctx context.Context, c *clients) (admiraltyState, []string, error) {
	st := admiraltyState{
		Secrets:      map[types.NamespacedName]*corev1.Secret{},
		SecretErrors: map[types.NamespacedName]string{},
		VirtualNodes: map[string]int{},
	}
	dyn, err := dynamic.NewForConfig(c.rest)
	if err != nil {
		return st, nil, fmt.Errorf("creating a client for %s: %w", c.where, err)
	}
	var missing []string
	for _, r := range admiraltyResources {
		list, err := dyn.Resource(r.resource).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			missing = append(missing, r.kind)
			continue
		}
		if err != nil {
			return st, nil, c.explainAPIError(err, "listing Admiralty's "+r.resource.Resource)
		}
		for _, u := range list.Items {
			u.SetKind(r.kind)
			st.Objects = append(st.Objects, u)
			ns, _, _ := unstructuredString(u.Object, "spec", "kubeconfigSecret", "namespace")
			name, ok, _ := unstructuredString(u.Object, "spec", "kubeconfigSecret", "name")
			if !ok || name == "" {
				continue
			}
			if r.namespaced {
				ns = u.GetNamespace()
			}
			if ns == "" {
				continue
			}
			key := types.NamespacedName{Namespace: ns, Name: name}
			secret, err := c.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				st.SecretErrors[key] = err.Error()
			default:
				st.Secrets[key] = secret
			}
		}
	}

	namespaces, err := c.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: admiraltyNamespaceLabel + "=enabled"})
	if err != nil {
		return st, nil, c.explainAPIError(err, "listing namespaces")
	}
	for _, ns := range namespaces.Items {
		st.Namespaces = append(st.Namespaces, ns.Name)
	}
	if err := readWorkloads(ctx, c, &st); err != nil {
		return st, nil, err
	}

	nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: admiraltyProviderLabel + "=" + admiraltyProvider})
	if err != nil {
		return st, nil, c.explainAPIError(err, "listing Admiralty's virtual nodes")
	}
	for _, n := range nodes.Items {
		pods, err := c.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()})
		if err != nil {
			return st, nil, c.explainAPIError(err, "listing the pods of node "+n.Name)
		}
		st.VirtualNodes[n.Name] = len(pods.Items)
	}

	services, err := c.kube.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return st, nil, c.explainAPIError(err, "listing Services")
	}
	for i := range services.Items {
		if rerouted(&services.Items[i]) {
			st.ReroutedServices = append(st.ReroutedServices, types.NamespacedName{Namespace: services.Items[i].Namespace, Name: services.Items[i].Name})
		}
	}
	return st, missing, nil
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		if cur, ok = m[p]; !ok {
			return "", false, nil
		}
	}
	s, ok := cur.(string)
	return s, ok, nil
}

// readWorkloads finds the top-level workloads and the bare pods whose pods
// carry Admiralty's elect annotation; what a controller owns (a
// Deployment's ReplicaSets, a CronJob's Jobs, any controller's pods) is
// reported through its owner.
func readWorkloads(ctx context.Context, c *clients, st *admiraltyState) error {
	add := func(kind string, meta metav1.ObjectMeta, template map[string]string) {
		if !podTemplateOptedIn(template) {
			return
		}
		if kind != "deployment" && kind != "statefulset" && kind != "daemonset" && kind != "cronjob" && metav1.GetControllerOf(&meta) != nil {
			return
		}
		st.Workloads = append(st.Workloads, admiraltyWorkload{Kind: kind, Namespace: meta.Namespace, Name: meta.Name, Annotations: admiraltyAnnotations(template)})
	}
	apps, batch, core := c.kube.AppsV1(), c.kube.BatchV1(), c.kube.CoreV1()
	deployments, err := apps.Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return c.explainAPIError(err, "listing Deployments")
	}
	for _, o := range deployments.Items {
		add("deployment", o.ObjectMeta, o.Spec.Template.Annotations)
	}
	statefulSets, err := apps.StatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return c.explainAPIError(err, "listing StatefulSets")
	}
	for _, o := range statefulSets.Items {
		add("statefulset", o.ObjectMeta, o.Spec.Template.Annotations)
	}
	daemonSets, err := apps.DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return c.explainAPIError(err, "listing DaemonSets")
	}
	for _, o := range daemonSets.Items {
		add("daemonset", o.ObjectMeta, o.Spec.Template.Annotations)
	}
	replicaSets, err := apps.ReplicaSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return c.explainAPIError(err, "listing ReplicaSets")
	}
	for _, o := range replicaSets.Items {
		add("replicaset", o.ObjectMeta, o.Spec.Template.Annotations)
	}
	cronJobs, err := batch.CronJobs("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return c.explainAPIError(err, "listing CronJobs")
	}
	for _, o := range cronJobs.Items {
		add("cronjob", o.ObjectMeta, o.Spec.JobTemplate.Spec.Template.Annotations)
	}
	jobs, err := batch.Jobs("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return c.explainAPIError(err, "listing Jobs")
	}
	for _, o := range jobs.Items {
		add("job", o.ObjectMeta, o.Spec.Template.Annotations)
	}
	pods, err := core.Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return c.explainAPIError(err, "listing Pods")
	}
	for _, o := range pods.Items {
		add("pod", o.ObjectMeta, o.Annotations)
	}
	return nil
}

// describe names an object as the report does: "ClusterTarget c2".
func describe(obj client.Object) string {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	return kind + " " + refName(obj.GetNamespace(), obj.GetName())
}

// writeMigrationYAML prints the objects as a YAML stream; a Secret is
// named in a comment, not printed: it holds a credential.
func writeMigrationYAML(w io.Writer, objs []client.Object) error {
	var buf bytes.Buffer
	for _, obj := range objs {
		if s, ok := obj.(*corev1.Secret); ok {
			fmt.Fprintf(&buf, "# Secret %s/%s: a copy of the kubeconfig of an Admiralty Secret (see the report on standard error); --apply writes it, its credential is not printed here.\n", s.Namespace, s.Name)
			continue
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		delete(u, "status")
		if meta, ok := u["metadata"].(map[string]any); ok {
			delete(meta, "creationTimestamp")
		}
		data, err := yaml.Marshal(u)
		if err != nil {
			return err
		}
		buf.WriteString("---\n")
		buf.Write(data)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// writeFindings prints what migrate found, one block per thing read.
func writeFindings(w io.Writer, findings []finding) {
	for i, f := range findings {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s: %s\n", f.Subject, f.Result)
		for _, n := range f.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		for _, c := range f.Commands {
			fmt.Fprintf(w, "  run:  %s\n", c)
		}
	}
}

// applyMigrated creates obj, or leaves an existing object of its name as
// it is; it says which.
func applyMigrated(ctx context.Context, c *clients, obj client.Object) (string, error) {
	got := obj.DeepCopyObject().(client.Object)
	err := c.cr.Get(ctx, client.ObjectKeyFromObject(obj), got)
	switch {
	case apierrors.IsNotFound(err) && !notInstalled(err):
		if err := c.cr.Create(ctx, obj); err != nil {
			if apierrors.IsNotFound(err) && obj.GetNamespace() != "" {
				return "", fmt.Errorf("namespace %s does not exist in %s (is Flotilla's agent there? name its namespace with --agent-namespace): %w", obj.GetNamespace(), c.where, err)
			}
			return "", c.explainAPIError(err, "creating "+describe(obj))
		}
		return "created", nil
	case err != nil:
		return "", c.explainAPIError(err, "reading "+describe(obj))
	}
	if sameMigrated(got, obj) {
		return "unchanged", nil
	}
	return "exists with another spec: left as it is (delete it and run again to take Admiralty's)", nil
}

// sameMigrated reports whether an existing object says what migrate
// would write. A Secret is the same when its kubeconfig is; the agent
// renews the token in place, so a renewed one is reported as left as it is.
func sameMigrated(got, want client.Object) bool {
	switch w := want.(type) {
	case *corev1.Secret:
		return bytes.Equal(got.(*corev1.Secret).Data[protocol.InvitationKubeconfigKey], w.Data[protocol.InvitationKubeconfigKey])
	case *v1alpha1.Target:
		return equality.Semantic.DeepEqual(got.(*v1alpha1.Target).Spec, w.Spec)
	case *v1alpha1.ClusterTarget:
		return equality.Semantic.DeepEqual(got.(*v1alpha1.ClusterTarget).Spec, w.Spec)
	case *v1alpha1.Source, *v1alpha1.ClusterSource:
		return equality.Semantic.DeepEqual(specOf(got), specOf(want))
	}
	return false
}
