package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
		out  string
	}{
		{args: []string{"--help"}, want: ExitOK, out: "kubectl flotilla"},
		{args: []string{"explain", "--help"}, want: ExitOK, out: "Insufficient cpu"},
		{args: []string{"bogus"}, want: ExitUsage, out: "unknown command"},
		{args: []string{"invite"}, want: ExitUsage, out: "SOURCE"},
		{args: []string{"invite", "a", "b"}, want: ExitUsage, out: "only one"},
		{args: []string{"invite", "c1"}, want: ExitUsage, out: "--namespaces"},
		{args: []string{"join", "t1"}, want: ExitUsage, out: "--kubeconfig-from"},
		{args: []string{"join", "t1", "--kubeconfig-from", "f", "--labels", "x"}, want: ExitUsage, out: "key=value"},
		{args: []string{"status", "-o", "xml"}, want: ExitUsage, out: "table, json, yaml"},
		{args: []string{"status", "--nope"}, want: ExitUsage, out: "unknown flag"},
		{args: []string{"status", "extra"}, want: ExitUsage, out: "no arguments"},
		{args: []string{"status", "--kubeconfig", "/nonexistent/kubeconfig"}, want: ExitError, out: "kubeconfig"},
		{args: []string{"join", "t1", "--kubeconfig-from", "/nonexistent/file"}, want: ExitError, out: "--kubeconfig-from"},
	} {
		var stdout, stderr bytes.Buffer
		got := Main(tc.args, &stdout, &stderr)
		if got != tc.want {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, got, tc.want, stderr.String())
		}
		if !strings.Contains(stdout.String()+stderr.String(), tc.out) {
			t.Errorf("%v: output lacks %q: stdout %q stderr %q", tc.args, tc.out, stdout.String(), stderr.String())
		}
	}
}

func TestWriteStatusTable(t *testing.T) {
	now := time.Unix(100000, 0)
	exp := metav1.NewTime(now.Add(11 * time.Hour))
	st := &Status{
		Cluster: "c1",
		Targets: []TargetStatus{
			{Kind: "ClusterTarget", Name: "t1", Ready: "True", Reason: "Connected", VirtualNode: "flotilla-t1", Namespaces: []string{"shop"}, TokenExpirationTime: &exp, BoundPods: 3},
			{Kind: "ClusterTarget", Name: "t2", Ready: "False", Reason: "Unauthorized", Message: "the token expired", VirtualNode: "flotilla-t2"},
		},
		PendingPods: 2,
		Invitations: []InvitationStatus{{Kind: "ClusterSource", Name: "c2", ClusterName: "c2", Ready: "True", Reason: "AccessGranted",
			Namespaces: []string{"shop"}, Summary: &SummaryStatus{Name: "s", Nodes: 4, FreeCPU: "12", FreeMemory: "48Gi", UpdateTime: &exp}}},
	}
	var buf bytes.Buffer
	if err := writeStatus(&buf, st, "table", now); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"flotilla-t1", "in 11h", "waiting for a target: 2", "t2: the token expired (the target refuses", "AccessGranted", "48Gi"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestNotInstalled(t *testing.T) {
	c := &clients{where: "t1"}
	missing := &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "multicluster.flotilla.dev", Kind: "ClusterSource"}}
	err := c.explainAPIError(missing, "creating ClusterSource c1")
	if !strings.Contains(err.Error(), "install the Flotilla chart") || !errors.Is(err, missing) {
		t.Errorf("CRDs missing: %v", err)
	}
	gone := apierrors.NewNotFound(schema.GroupResource{Group: "multicluster.flotilla.dev", Resource: "clustersources"}, "c1")
	if notInstalled(gone) {
		t.Errorf("an object that does not exist is not a missing CRD")
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "x", errors.New("no"))
	if err := c.explainAPIError(forbidden, "reading Secret x"); !strings.Contains(err.Error(), "you may not") {
		t.Errorf("forbidden: %v", err)
	}
}
