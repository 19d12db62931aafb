package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/cli"
	"github.com/flotilla-dev/flotilla/pkg/invitation"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestCLI connects two clusters with the kubectl plugin alone (invite in
// the target, join in the source), places a pod through them, and reads
// status and explain as a user would: the built binary, run against each
// cluster's kubeconfig.
func TestCLI(t *testing.T) {
	t.Parallel()
	plugin := buildPlugin(t)
	src, tgt := agentsOnSourceAndTarget(t, sandbox.NodeSpec{CPU: "8"})
	ctx := t.Context()
	kubectl := func(c *sandbox.Cluster, args ...string) cliResult {
		return runPlugin(t, plugin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	}

	invitationFile := filepath.Join(t.TempDir(), "tgt.yaml")
	t.Run("invite in the target writes the file join reads", func(t *testing.T) {
		r := kubectl(tgt, "invite", "src", "--namespaces", placementNS, "--create-namespaces", "-o", invitationFile)
		r.mustSucceed(t)
		info, err := os.Stat(invitationFile)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("the invitation file holds a credential but has mode %v", info.Mode().Perm())
		}
		data, err := os.ReadFile(invitationFile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "kind: Secret") || strings.Contains(string(data), "resourceVersion") {
			t.Errorf("want a clean Secret manifest, got:\n%s", data)
		}
		if _, err := tgt.Client().CoreV1().Namespaces().Get(ctx, placementNS, metav1.GetOptions{}); err != nil {
			t.Errorf("--create-namespaces: %v", err)
		}
		// Again: the invitation is unchanged and the same file comes out.
		again := kubectl(tgt, "invite", "src", "--namespaces", placementNS, "--create-namespaces")
		again.mustSucceed(t)
		if !strings.Contains(again.stdout, "kind: Secret") || !strings.Contains(again.stderr, "unchanged") {
			t.Errorf("invite again: stdout %q stderr %q", again.stdout, again.stderr)
		}
	})

	t.Run("join in the source connects the target", func(t *testing.T) {
		r := kubectl(src, "join", "tgt", "--kubeconfig-from", invitationFile,
			"--agent-namespace", sandbox.AgentNamespace, "--labels", "topology.kubernetes.io/region=eu-west")
		r.mustSucceed(t)
		if !strings.Contains(r.stdout, "ClusterTarget tgt is Ready") || !strings.Contains(r.stdout, "flotilla-tgt") {
			t.Errorf("join's report: %q", r.stdout)
		}
		secret, err := src.Client().CoreV1().Secrets(sandbox.AgentNamespace).Get(ctx, cli.SecretPrefix+"tgt", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(secret.Data[invitation.KubeconfigKey]) == 0 || string(secret.Data[invitation.SummaryKey]) != "flotilla-clustersource.src" {
			t.Errorf("the Secret holds keys %v, summary %q", keys(secret.Data), secret.Data[invitation.SummaryKey])
		}
		ct := &v1alpha1.ClusterTarget{}
		if err := src.CRClient().Get(ctx, client.ObjectKey{Name: "tgt"}, ct); err != nil {
			t.Fatal(err)
		}
		if ct.Spec.Labels["topology.kubernetes.io/region"] != "eu-west" || strings.Join(ct.Status.Namespaces, ",") != placementNS {
			t.Errorf("ClusterTarget tgt: labels %v, namespaces %v", ct.Spec.Labels, ct.Status.Namespaces)
		}
	})

	srcClient := src.Client()
	t.Run("an opted-in pod runs in the target; status counts it", func(t *testing.T) {
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, optedInPod("web", "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, srcClient, placementNS, "web", "running in tgt", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-tgt" && p.Status.Phase == corev1.PodRunning
		})
		var st cli.Status
		kubectl(src, "status", "-o", "json").mustDecode(t, &st)
		if len(st.Targets) != 1 {
			t.Fatalf("want one target, got %+v", st.Targets)
		}
		if got := st.Targets[0]; got.Name != "tgt" || got.Ready != "True" || got.BoundPods != 1 || got.VirtualNode != "flotilla-tgt" ||
			strings.Join(got.Namespaces, ",") != placementNS || got.TokenExpirationTime == nil {
			t.Errorf("target tgt: %+v", got)
		}
		if st.PendingPods != 0 {
			t.Errorf("%d pods pending, want 0", st.PendingPods)
		}
		table := kubectl(src, "status")
		table.mustSucceed(t)
		if !strings.Contains(table.stdout, "flotilla-tgt") || !strings.Contains(table.stdout, "Connected") {
			t.Errorf("status table:\n%s", table.stdout)
		}
		// The target's side: the invitation and its summary.
		waitFor(t, 30*time.Second, "the invitation's summary in the target's status", func() (bool, string) {
			var tst cli.Status
			r := kubectl(tgt, "status", "-o", "json")
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &tst) != nil || len(tst.Invitations) != 1 {
				return false, r.String()
			}
			inv := tst.Invitations[0]
			return inv.Name == "src" && inv.Ready == "True" && inv.Summary != nil && inv.Summary.Nodes == 1 && inv.Summary.FreeCPU == "7", r.stdout
		})
	})

	t.Run("explain names the target and its scheduler's reason for a pod that fits nowhere", func(t *testing.T) {
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, optedInPod("huge", "64"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var text cliResult
		waitFor(t, 60*time.Second, "explain to report tgt's Insufficient cpu", func() (bool, string) {
			text = kubectl(src, "explain", "huge", "-n", placementNS)
			return text.code == 0 && strings.Contains(text.stdout, "tgt") && strings.Contains(text.stdout, cli.AnswerUnschedulable) &&
				strings.Contains(text.stdout, "Insufficient cpu"), text.String()
		})
		t.Logf("%s", text)
		// By name, and as JSON.
		var e cli.Explanation
		kubectl(src, "explain", "huge", "-n", placementNS, "--cluster-name", "src", "-o", "json").mustDecode(t, &e)
		if len(e.Targets) != 1 || e.Targets[0].Target != "tgt" || e.Targets[0].Answer != cli.AnswerUnschedulable ||
			!strings.Contains(e.Targets[0].Reason, "Insufficient cpu") || e.Targets[0].Candidate == "" || e.Node != "" {
			t.Errorf("explain -o json: %+v", e)
		}
		// The pod that runs there: bound, elected.
		kubectl(src, "explain", "web", "-n", placementNS, "-o", "json").mustDecode(t, &e)
		t.Logf("%s", kubectl(src, "explain", "web", "-n", placementNS))
		if e.RunsIn != "tgt" || e.Election == nil || e.Election.Target != "tgt" || len(e.Targets) != 1 ||
			e.Targets[0].Answer != cli.AnswerBound || !e.Targets[0].Elected {
			t.Errorf("explain web: %+v", e)
		}
	})

	t.Run("mistakes exit 2, failures 1, with what to do", func(t *testing.T) {
		if r := kubectl(tgt, "invite", "src"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--namespaces") {
			t.Errorf("invite without namespaces: %s", r)
		}
		if r := kubectl(src, "explain", "nosuchpod", "-n", placementNS); r.code != cli.ExitError || !strings.Contains(r.stderr, "not found") {
			t.Errorf("explain of a missing pod: %s", r)
		}
	})
}

// buildPlugin builds kubectl-flotilla from this checkout.
func buildPlugin(t *testing.T) string {
	t.Helper()
	root, err := sandbox.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kubectl-flotilla")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/kubectl-flotilla")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building kubectl-flotilla: %v\n%s", err, out)
	}
	return bin
}

type cliResult struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("kubectl-flotilla %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

func (r cliResult) mustSucceed(t *testing.T) {
	t.Helper()
	if r.code != 0 {
		t.Fatal(r.String())
	}
	// Not stdout: invite prints a credential there.
	t.Logf("kubectl-flotilla %s:\n%s", strings.Join(r.args, " "), r.stderr)
}

func (r cliResult) mustDecode(t *testing.T, v any) {
	t.Helper()
	if r.code != 0 {
		t.Fatal(r.String())
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("%s\ndecoding: %v", r, err)
	}
}

// runPlugin runs the plugin with a deadline, so a hung command fails the
// test instead of stalling it.
func runPlugin(t *testing.T, bin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil && t.Context().Err() == nil:
		t.Fatalf("kubectl-flotilla %s did not end within 2 minutes\n%s", strings.Join(args, " "), r)
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running kubectl-flotilla %s: %v", strings.Join(args, " "), err)
	}
	return r
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
