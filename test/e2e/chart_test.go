package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// onlyDefaultProfile is the scheduler of a cluster whose candidates the
// release's own scheduler takes.
const onlyDefaultProfile = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
`

// TestChart installs charts/flotilla with the real helm and runs its agent
// and scheduler with the chart's arguments, configuration and
// ServiceAccounts: RBAC the chart forgot fails here.
func TestChart(t *testing.T) {
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "c1", Nodes: []sandbox.NodeSpec{{CPU: "4"}}, SchedulerConfig: onlyDefaultProfile},
	}})
	ctx := t.Context()
	c := s.Cluster("c1")
	client := c.Client()
	helm := filepath.Join(c.BinDir(), "helm")

	t.Run("lint and a server-side dry run", func(t *testing.T) {
		if out, err := exec.CommandContext(ctx, helm, "lint", "--strict", sandbox.ChartDir(), "--set", "clusterName=c1").CombinedOutput(); err != nil {
			t.Fatalf("helm lint: %v\n%s", err, out)
		}
		if _, err := c.Helm(ctx, "install", "dry", sandbox.ChartDir(), "-n", sandbox.ReleaseNamespace, "--create-namespace",
			"--dry-run=server", "--set", "clusterName=c1"); err != nil {
			t.Fatal(err)
		}
	})

	release, err := c.InstallRelease(ctx, sandbox.ReleaseOptions{Scheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(t, client, placementNS)
	if err := c.AddTarget(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitTargetReady(ctx, "c1", 60*time.Second); err != nil {
		t.Fatal(err)
	}

	t.Run("a pod is placed by the chart's agent and scheduler under their own ServiceAccounts", func(t *testing.T) {
		if _, err := client.CoreV1().Pods(placementNS).Create(ctx, optedInPod("charted", "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, client, placementNS, "charted", "Running on flotilla-c1", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-c1" && p.Status.Phase == corev1.PodRunning
		})
	})

	t.Run("with the agent down, other pods run and opted-in pods are refused naming Flotilla", func(t *testing.T) {
		if err := release.Agent.Stop(); err != nil {
			t.Fatal(err)
		}
		plain := optedInPod("plain", "100m")
		delete(plain.Labels, protocol.ElectLabel)
		if _, err := client.CoreV1().Pods(placementNS).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a pod that is not opted in was refused while the agent is down: %v", err)
		}
		waitPod(t, client, placementNS, "plain", "scheduled by the cluster's scheduler", func(p *corev1.Pod) bool {
			return p.Spec.NodeName != "" && !strings.HasPrefix(p.Spec.NodeName, "flotilla-")
		})
		_, err := client.CoreV1().Pods(placementNS).Create(ctx, optedInPod("refused", "100m"), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "pods.multicluster.flotilla.dev") {
			t.Fatalf("an opted-in pod while the agent is down: want a refusal naming the webhook, got %v", err)
		}
		t.Logf("refused: %v", err)
		if err := release.Agent.Start(); err != nil {
			t.Fatal(err)
		}
		if err := release.Agent.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an upgrade keeps the webhook's CA: opted-in pods are admitted throughout", func(t *testing.T) {
		before := caBundleOf(t, client)
		if _, err := c.Helm(ctx, "upgrade", release.Name, sandbox.ChartDir(), "-n", sandbox.ReleaseNamespace, "--reuse-values", "--set", "agent.workers=32"); err != nil {
			t.Fatal(err)
		}
		if after := caBundleOf(t, client); after != before {
			t.Fatalf("helm upgrade changed the webhook's caBundle (%d bytes → %d)", len(before), len(after))
		}
		if ok, msg := admitted(ctx, client, placementNS); !ok {
			t.Fatalf("after the upgrade: %s", msg)
		}
	})
}

func caBundleOf(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	var ca string
	waitFor(t, 30*time.Second, "a caBundle in the webhook configuration", func() (bool, string) {
		mwc, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "flotilla", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ca = string(mwc.Webhooks[0].ClientConfig.CABundle)
		return ca != "", fmt.Sprintf("%d bytes", len(ca))
	})
	return ca
}
