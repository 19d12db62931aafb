package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Status is what `kubectl flotilla status` reports of one cluster: as a
// source (its targets and its pods) and as a target (its invitations).
type Status struct {
	// Cluster is the kubeconfig context (or server) that was asked.
	Cluster string `json:"cluster"`
	// Targets are the cluster's Targets and ClusterTargets.
	Targets []TargetStatus `json:"targets"`
	// PendingPods counts source pods (schedulerName flotilla-source) not
	// bound to any node yet.
	PendingPods int `json:"pendingPods"`
	// Invitations are the cluster's Sources and ClusterSources.
	Invitations []InvitationStatus `json:"invitations"`
}

// TargetStatus is one Target or ClusterTarget.
type TargetStatus struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Self      bool   `json:"self,omitempty"`
	// Ready, Reason and Message are the Ready condition's.
	Ready       string   `json:"ready"`
	Reason      string   `json:"reason,omitempty"`
	Message     string   `json:"message,omitempty"`
	VirtualNode string   `json:"virtualNode,omitempty"`
	Namespaces  []string `json:"namespaces,omitempty"`
	// TokenExpirationTime is when the target's current token expires.
	TokenExpirationTime *metav1.Time `json:"tokenExpirationTime,omitempty"`
	// BoundPods counts the source pods bound to the target's virtual node.
	BoundPods int  `json:"boundPods"`
	Deleting  bool `json:"deleting,omitempty"`
}

// InvitationStatus is one Source or ClusterSource.
type InvitationStatus struct {
	Kind             string         `json:"kind"`
	Namespace        string         `json:"namespace,omitempty"`
	Name             string         `json:"name"`
	ClusterName      string         `json:"clusterName"`
	Ready            string         `json:"ready"`
	Reason           string         `json:"reason,omitempty"`
	Message          string         `json:"message,omitempty"`
	Namespaces       []string       `json:"namespaces,omitempty"`
	ServiceAccount   string         `json:"serviceAccount,omitempty"`
	KubeconfigSecret string         `json:"kubeconfigSecret,omitempty"`
	Summary          *SummaryStatus `json:"summary,omitempty"`
}

// SummaryStatus is the part of an invitation's ClusterSummary status shows.
type SummaryStatus struct {
	Name       string       `json:"name"`
	Nodes      int32        `json:"nodes"`
	FreeCPU    string       `json:"freeCPU,omitempty"`
	FreeMemory string       `json:"freeMemory,omitempty"`
	UpdateTime *metav1.Time `json:"updateTime,omitempty"`
}

func newStatusCommand(kube *kubeFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status [-o table|json|yaml]",
		Short: "Show this cluster's targets, its pods placed through them, and its invitations",
		Long: `Shows what Flotilla does in this cluster.

As a source: every Target and ClusterTarget with its Ready condition and
reason, its virtual node, the namespaces its invitation covers, when its
token expires, and how many of this cluster's pods run there; and how many
source pods wait for a target.

As a target (if it invites any source): every Source and ClusterSource with
its Ready condition, the namespaces it covers, and what its ClusterSummary
tells the source (nodes, free cpu and memory).`,
		Example: `  kubectl flotilla status
  kubectl --context c1 flotilla status -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := oneOf("output", output, "table", "json", "yaml"); err != nil {
				return err
			}
			c, err := kube.clients()
			if err != nil {
				return err
			}
			st, err := collectStatus(cmd.Context(), c)
			if err != nil {
				return err
			}
			return writeStatus(cmd.OutOrStdout(), st, output, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "Output format: table, json or yaml.")
	return cmd
}

func collectStatus(ctx context.Context, c *clients) (*Status, error) {
	st := &Status{Cluster: c.where, Targets: []TargetStatus{}, Invitations: []InvitationStatus{}}
	installed := false

	cts := &v1alpha1.ClusterTargetList{}
	switch err := c.cr.List(ctx, cts); {
	case err == nil:
		installed = true
		for _, t := range cts.Items {
			st.Targets = append(st.Targets, targetStatus("ClusterTarget", "", t.Name, t.Spec.Self, t.DeletionTimestamp != nil, t.Status))
		}
	case !notInstalled(err):
		return nil, c.explainAPIError(err, "listing ClusterTargets")
	}
	ts := &v1alpha1.TargetList{}
	switch err := c.cr.List(ctx, ts); {
	case err == nil:
		installed = true
		for _, t := range ts.Items {
			st.Targets = append(st.Targets, targetStatus("Target", t.Namespace, t.Name, t.Spec.Self, t.DeletionTimestamp != nil, t.Status))
		}
	case !notInstalled(err):
		return nil, c.explainAPIError(err, "listing Targets")
	}

	if len(st.Targets) > 0 {
		bound, pending, err := countSourcePods(ctx, c)
		if err != nil {
			return nil, err
		}
		st.PendingPods = pending
		for i := range st.Targets {
			st.Targets[i].BoundPods = bound[st.Targets[i].VirtualNode]
		}
	}

	var summaries []string
	css := &v1alpha1.ClusterSourceList{}
	switch err := c.cr.List(ctx, css); {
	case err == nil:
		installed = true
		for _, s := range css.Items {
			st.Invitations = append(st.Invitations, invitationStatus("ClusterSource", "", s.Name, s.Spec.ClusterName, s.Status))
		}
	case !notInstalled(err):
		return nil, c.explainAPIError(err, "listing ClusterSources")
	}
	srcs := &v1alpha1.SourceList{}
	switch err := c.cr.List(ctx, srcs); {
	case err == nil:
		installed = true
		for _, s := range srcs.Items {
			st.Invitations = append(st.Invitations, invitationStatus("Source", s.Namespace, s.Name, s.Spec.ClusterName, s.Status))
		}
	case !notInstalled(err):
		return nil, c.explainAPIError(err, "listing Sources")
	}
	if !installed {
		return nil, fmt.Errorf("Flotilla's CRDs are not installed in %s: install the Flotilla chart in this cluster (charts/flotilla, namespace %s)", c.where, DefaultAgentNamespace)
	}
	for _, inv := range st.Invitations {
		if inv.Summary != nil {
			summaries = append(summaries, inv.Summary.Name)
		}
	}
	if len(summaries) > 0 {
		list := &v1alpha1.ClusterSummaryList{}
		if err := c.cr.List(ctx, list); err != nil {
			return nil, c.explainAPIError(err, "listing ClusterSummaries")
		}
		byName := map[string]*v1alpha1.ClusterSummary{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		for i := range st.Invitations {
			s := st.Invitations[i].Summary
			if s == nil {
				continue
			}
			if sum, ok := byName[s.Name]; ok {
				s.Nodes, s.UpdateTime = sum.Status.Nodes, sum.Status.UpdateTime
				if q, ok := sum.Status.Free[corev1.ResourceCPU]; ok {
					s.FreeCPU = q.String()
				}
				if q, ok := sum.Status.Free[corev1.ResourceMemory]; ok {
					s.FreeMemory = q.String()
				}
			}
		}
	}
	sort.SliceStable(st.Targets, func(i, j int) bool { return targetKey(st.Targets[i]) < targetKey(st.Targets[j]) })
	sort.SliceStable(st.Invitations, func(i, j int) bool {
		a, b := st.Invitations[i], st.Invitations[j]
		return a.Kind+"/"+a.Namespace+"/"+a.Name < b.Kind+"/"+b.Namespace+"/"+b.Name
	})
	return st, nil
}

func targetKey(t TargetStatus) string { return t.Kind + "/" + t.Namespace + "/" + t.Name }

func targetStatus(kind, namespace, name string, self, deleting bool, s v1alpha1.TargetStatus) TargetStatus {
	out := TargetStatus{
		Kind: kind, Namespace: namespace, Name: name, Self: self, Deleting: deleting, Ready: "Unknown",
		VirtualNode: s.VirtualNode, Namespaces: s.Namespaces, TokenExpirationTime: s.TokenExpirationTime,
	}
	if out.VirtualNode == "" {
		out.VirtualNode = protocol.VirtualNodeName(namespace, name)
	}
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.TargetReady); c != nil {
		out.Ready, out.Reason, out.Message = string(c.Status), c.Reason, c.Message
	}
	return out
}

func invitationStatus(kind, namespace, name, clusterName string, s v1alpha1.SourceStatus) InvitationStatus {
	out := InvitationStatus{
		Kind: kind, Namespace: namespace, Name: name, ClusterName: clusterName, Ready: "Unknown",
		Namespaces: s.Namespaces, ServiceAccount: s.ServiceAccount, KubeconfigSecret: s.KubeconfigSecret,
	}
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.SourceReady); c != nil {
		out.Ready, out.Reason, out.Message = string(c.Status), c.Reason, c.Message
	}
	if s.Summary != "" {
		out.Summary = &SummaryStatus{Name: s.Summary}
	}
	return out
}

// countSourcePods counts the source pods bound to each node and those not
// bound yet, in pages.
func countSourcePods(ctx context.Context, c *clients) (bound map[string]int, pending int, err error) {
	bound = map[string]int{}
	opts := metav1.ListOptions{FieldSelector: "spec.schedulerName=" + protocol.SourceSchedulerName, Limit: 500}
	for {
		list, err := c.kube.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return nil, 0, c.explainAPIError(err, "listing source pods")
		}
		for _, p := range list.Items {
			switch {
			case p.DeletionTimestamp != nil:
			case p.Spec.NodeName != "":
				bound[p.Spec.NodeName]++
			case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
				pending++
			}
		}
		if list.Continue == "" {
			return bound, pending, nil
		}
		opts.Continue = list.Continue
	}
}

func writeStatus(w io.Writer, st *Status, format string, now time.Time) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	case "yaml":
		out, err := yaml.Marshal(st)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	if len(st.Targets) == 0 && len(st.Invitations) == 0 {
		fmt.Fprintf(w, "No targets and no invitations in %s.\n", st.Cluster)
		fmt.Fprintln(w, "To connect clusters, run 'kubectl flotilla invite' in the target, then 'kubectl flotilla join' here.")
		return nil
	}
	if len(st.Targets) > 0 {
		fmt.Fprintf(w, "Targets of %s (this cluster as a source):\n", st.Cluster)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tKIND\tREADY\tREASON\tNODE\tNAMESPACES\tTOKEN EXPIRES\tPODS")
		for _, t := range st.Targets {
			name := t.Name
			if t.Namespace != "" {
				name = t.Namespace + "/" + t.Name
			}
			namespaces := strings.Join(t.Namespaces, ",")
			if namespaces == "" {
				namespaces = "(all)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", name, t.Kind, t.Ready, orDash(t.Reason), t.VirtualNode, namespaces, expiry(t.TokenExpirationTime, now), t.BoundPods)
		}
		tw.Flush()
		fmt.Fprintf(w, "Source pods waiting for a target: %d\n", st.PendingPods)
		for _, t := range st.Targets {
			if t.Ready != "True" && t.Message != "" {
				fmt.Fprintf(w, "  %s: %s", t.Name, oneLine(t.Message))
				if h := hint(t.Reason); h != "" {
					fmt.Fprintf(w, " (%s)", h)
				}
				fmt.Fprintln(w)
			}
		}
	}
	if len(st.Invitations) > 0 {
		if len(st.Targets) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "Invitations in %s (this cluster as a target):\n", st.Cluster)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tKIND\tSOURCE CLUSTER\tREADY\tREASON\tNAMESPACES\tNODES\tFREE CPU\tFREE MEMORY")
		for _, inv := range st.Invitations {
			name := inv.Name
			if inv.Namespace != "" {
				name = inv.Namespace + "/" + inv.Name
			}
			nodes, cpu, mem := "-", "-", "-"
			if s := inv.Summary; s != nil && s.UpdateTime != nil {
				nodes, cpu, mem = fmt.Sprint(s.Nodes), orDash(s.FreeCPU), orDash(s.FreeMemory)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, inv.Kind, inv.ClusterName, inv.Ready, orDash(inv.Reason), orDash(strings.Join(inv.Namespaces, ",")), nodes, cpu, mem)
		}
		tw.Flush()
		for _, inv := range st.Invitations {
			if inv.Ready != "True" && inv.Message != "" {
				fmt.Fprintf(w, "  %s: %s", inv.Name, oneLine(inv.Message))
				if h := hint(inv.Reason); h != "" {
					fmt.Fprintf(w, " (%s)", h)
				}
				fmt.Fprintln(w)
			}
		}
	}
	return nil
}

func expiry(t *metav1.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	d := t.Sub(now)
	if d < 0 {
		return "expired " + duration.HumanDuration(-d) + " ago"
	}
	return "in " + duration.HumanDuration(d)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
