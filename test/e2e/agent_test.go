package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/webhook"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestAgentLeaderElection runs two agent replicas against one cluster: both
// serve health, exactly one holds the lease, and when it dies the other takes
// over. Both serve the webhook behind one address, as a Service would: the
// API server must trust whichever replica it reaches, the standby as much as
// the leader, through the fail-over too.
func TestAgentLeaderElection(t *testing.T) {
	t.Parallel()
	// The agent binary with a configuration file of its own, not the
	// chart's: no release.
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "c1", Nodes: []sandbox.NodeSpec{{}}, WithoutRelease: true}}})
	c := s.Cluster("c1")
	client := c.Client()
	// What a Service is to the API server here: one address in front of
	// the replicas.
	fwd, err := sandbox.NewForwarder()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fwd.Close)
	// By name: the serving certificate holds DNS names only.
	_, port, _ := net.SplitHostPort(fwd.Addr())
	webhookURL := fmt.Sprintf("https://localhost:%s%s", port, webhook.Path)

	// One configuration file for both, as a ConfigMap would be; only what
	// differs between them is given per process.
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	config := fmt.Sprintf(`apiVersion: config.flotilla.dev/v1alpha1
kind: AgentConfiguration
clusterName: %s
webhook:
  url: %s
leaderElection:
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
`, c.Name, webhookURL)
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	type replica struct {
		*sandbox.Process
		probe, webhook string
	}
	start := func(id string) replica {
		ports, err := sandbox.FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		r := replica{probe: fmt.Sprintf("127.0.0.1:%d", ports[0]), webhook: fmt.Sprintf("127.0.0.1:%d", ports[2])}
		r.Process, err = c.Run("agent-"+id, c.BinDir()+"/flotilla-agent",
			"--kubeconfig="+c.Kubeconfig,
			"--config="+configFile,
			"--health-probe-bind-address="+r.probe,
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[1]),
			// Two replicas on one host: each needs its own webhook port.
			fmt.Sprintf("--webhook-port=%d", ports[2]),
			"--webhook-bind-host=127.0.0.1",
			"--webhook-cert-dir="+t.TempDir(),
		)
		if err != nil {
			t.Fatal(err)
		}
		waitHTTP(t, "http://"+r.probe+"/healthz")
		return r
	}
	leader := start("a")
	holder := waitLeaseHolder(t, c, "")
	standby := start("b")
	if got := waitLeaseHolder(t, c, ""); got != holder {
		t.Fatalf("lease moved from %s to %s while the leader was healthy", holder, got)
	}
	// Ready means serving the certificate, on the standby as on the leader.
	waitHTTP(t, "http://"+leader.probe+"/readyz")
	waitHTTP(t, "http://"+standby.probe+"/readyz")
	checkOneCertificate(t, client, leader.webhook, standby.webhook)

	// The cluster is its own target, so admitted pods are placed too.
	if err := c.AddTarget(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ha", Labels: map[string]string{protocol.NamespaceEnabledLabel: "true"}}}
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fwd.Route(standby.webhook, leader.webhook)
	waitFor(t, 30*time.Second, "the standby to admit an opted-in pod", func() (bool, string) { return admitted(t.Context(), client, ns.Name) })
	if fwd.Served(standby.webhook) == 0 {
		t.Fatal("the standby served no connection")
	}
	fwd.Route(leader.webhook, standby.webhook)
	waitFor(t, 30*time.Second, "the leader to admit an opted-in pod", func() (bool, string) { return admitted(t.Context(), client, ns.Name) })
	if fwd.Served(leader.webhook) == 0 {
		t.Fatal("the leader served no connection")
	}

	// The API server's connection goes to the standby before the leader
	// dies: from then on every pod must be admitted, without retries.
	fwd.Route(standby.webhook, leader.webhook)
	waitFor(t, 30*time.Second, "the standby to admit an opted-in pod", func() (bool, string) { return admitted(t.Context(), client, ns.Name) })
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	mustAdmit := func(when string) {
		t.Helper()
		for range 3 {
			if ok, msg := admitted(t.Context(), client, ns.Name); !ok {
				t.Fatalf("%s: %s", when, msg)
			}
		}
	}
	mustAdmit("leader killed, standby serving")
	// A real pod created while nobody leads: admitted now, placed by the
	// standby once it leads.
	if _, err := client.CoreV1().Pods(ns.Name).Create(t.Context(), optedInPod("during-failover", "10m"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating an opted-in pod while the leader is dead: %v", err)
	}
	newHolder := waitLeaseHolder(t, c, holder)
	if newHolder == holder {
		t.Fatalf("lease still held by the killed agent %s", holder)
	}
	if !standby.Running() {
		t.Fatalf("standby agent exited; see %s", standby.LogPath())
	}
	mustAdmit("standby took the lease")
	// The new leader's rotator finds the certificate valid and injected.
	waitHTTP(t, "http://"+standby.probe+"/readyz")
	checkOneCertificate(t, client, standby.webhook)
	mustAdmit("new leader ready")
	waitPod(t, client, ns.Name, "during-failover", "placed by the new leader", func(p *corev1.Pod) bool {
		return p.Spec.SchedulerName == protocol.SourceSchedulerName && p.Spec.NodeName == "flotilla-c1" && p.Status.Phase == corev1.PodRunning
	})
}

// admitted dry-runs the creation of an opted-in pod and reports whether the
// webhook made it a source pod.
func admitted(ctx context.Context, client kubernetes.Interface, ns string) (bool, string) {
	pod := optedInPod("ha-probe", "10m")
	got, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return false, err.Error()
	}
	if got.Spec.SchedulerName != protocol.SourceSchedulerName {
		return false, fmt.Sprintf("pod admitted unchanged (schedulerName %q)", got.Spec.SchedulerName)
	}
	return true, ""
}

// checkOneCertificate checks that every webhook address serves the serving
// certificate of the agent's Secret, and that the webhook configuration
// trusts the Secret's CA.
func checkOneCertificate(t *testing.T, client kubernetes.Interface, addrs ...string) {
	t.Helper()
	secret, err := client.CoreV1().Secrets("kube-system").Get(t.Context(), "flotilla-agent-webhook-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"])
	if err != nil {
		t.Fatalf("the Secret holds no serving pair: %v", err)
	}
	for _, addr := range addrs {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("dialing the webhook at %s: %v", addr, err)
		}
		served := conn.ConnectionState().PeerCertificates[0].Raw
		conn.Close()
		if !bytes.Equal(served, pair.Certificate[0]) {
			t.Errorf("the webhook at %s serves another certificate than the Secret's", addr)
		}
	}
	config, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "flotilla-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range config.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, secret.Data["ca.crt"]) {
			t.Errorf("webhook %s does not trust the Secret's CA", w.Name)
		}
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
