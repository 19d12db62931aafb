package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestAgentLeaderElection runs two agent replicas against one cluster: both
// serve health, exactly one holds the lease, and when it dies the other takes
// over.
func TestAgentLeaderElection(t *testing.T) {
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "c1", Nodes: []sandbox.NodeSpec{{}}}}})
	c := s.Cluster("c1")

	start := func(id string) (*sandbox.Process, string) {
		ports, err := sandbox.FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		probe := fmt.Sprintf("127.0.0.1:%d", ports[0])
		p, err := c.Run("agent-"+id, c.BinDir()+"/flotilla-agent",
			"--kubeconfig="+c.Kubeconfig,
			"--health-probe-bind-address="+probe,
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[1]),
			// Two replicas on one host: each needs its own webhook port.
			fmt.Sprintf("--webhook-port=%d", ports[2]),
			"--webhook-bind-host=127.0.0.1",
			"--webhook-cert-dir="+t.TempDir(),
			"--leader-elect-lease-duration=4s",
			"--leader-elect-renew-deadline=3s",
			"--leader-elect-retry-period=500ms",
		)
		if err != nil {
			t.Fatal(err)
		}
		waitHTTP(t, "http://"+probe+"/healthz")
		return p, probe
	}
	first, _ := start("a")
	holder := waitLeaseHolder(t, c, "")
	second, _ := start("b")
	if got := waitLeaseHolder(t, c, ""); got != holder {
		t.Fatalf("lease moved from %s to %s while the leader was healthy", holder, got)
	}
	if !second.Running() {
		t.Fatal("standby agent exited")
	}
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	newHolder := waitLeaseHolder(t, c, holder)
	if newHolder == holder {
		t.Fatalf("lease still held by the killed agent %s", holder)
	}
}

// waitLeaseHolder waits until the agent lease has a holder other than not.
func waitLeaseHolder(t *testing.T, c *sandbox.Cluster, not string) string {
	t.Helper()
	client := c.Client()
	var holder string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "flotilla-agent", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *lease.Spec.HolderIdentity
		return holder != "" && holder != not, nil
	})
	if err != nil {
		t.Fatalf("waiting for a lease holder other than %q (last %q): %v", not, holder, err)
	}
	return holder
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%s never answered 200: %v", url, err)
	}
}
