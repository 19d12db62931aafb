package e2e

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/pkg/agent"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// chartDocs renders the chart with the pinned helm and values, as an
// install in the sandbox's namespace would, and splits it into its
// documents.
func chartDocs(t *testing.T, values ...string) [][]byte {
	t.Helper()
	manifest, err := sandbox.Template(t.Context(), sandbox.ReleaseNamespace, append([]string{"clusterName=east"}, values...)...)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	for {
		doc, err := dec.Read()
		if err == io.EOF {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, doc)
	}
}

// renderedConfig renders the chart with values and loads the agent's
// configuration from its ConfigMap, strictly, as the agent does.
func renderedConfig(t *testing.T, values ...string) *agent.Config {
	t.Helper()
	for _, doc := range chartDocs(t, values...) {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal(doc, &cm); err != nil || cm.Kind != "ConfigMap" || !strings.HasSuffix(cm.Name, "-agent-config") {
			continue
		}
		c, err := agent.Load([]byte(cm.Data["config.yaml"]))
		if err != nil {
			t.Fatalf("the chart's configuration does not load: %v\n%s", err, cm.Data["config.yaml"])
		}
		return c
	}
	t.Fatal("the chart renders no agent configuration")
	return nil
}

// TestChartRendersTheAgentConfiguration checks that the configuration the
// chart renders loads strictly, that its defaults are the agent's own (a
// value of the chart and a default of the agent cannot drift apart), and
// that each of the chart's values reaches its field.
func TestChartRendersTheAgentConfiguration(t *testing.T) {
	t.Parallel()
	t.Run("defaults", func(t *testing.T) {
		c := renderedConfig(t)
		if err := agent.Validate(c); err != nil {
			t.Fatal(err)
		}
		d := agent.Default("east")
		for _, f := range []struct {
			name        string
			chart, self any
		}{
			{"placement.workers", *c.Placement.Workers, *d.Placement.Workers},
			{"placement.maxCandidates", *c.Placement.MaxCandidates, *d.Placement.MaxCandidates},
			{"placement.electionTimeout", c.Placement.ElectionTimeout.Duration, d.Placement.ElectionTimeout.Duration},
			{"placement.denyAfter", c.Placement.DenyAfter.Duration, d.Placement.DenyAfter.Duration},
			{"placement.localOverflowAfter", c.Placement.LocalOverflowAfter.Duration, d.Placement.LocalOverflowAfter.Duration},
			{"virtualNodes.workers", *c.VirtualNodes.Workers, *d.VirtualNodes.Workers},
			{"virtualNodes.notReadyAfter", c.VirtualNodes.NotReadyAfter.Duration, d.VirtualNodes.NotReadyAfter.Duration},
			{"virtualNodes.notReadyTolerationSeconds", *c.VirtualNodes.NotReadyTolerationSeconds, *d.VirtualNodes.NotReadyTolerationSeconds},
			{"virtualNodes.kubelet.port", *c.VirtualNodes.Kubelet.Port, *d.VirtualNodes.Kubelet.Port},
			{"targets.tokenRenewAfter", *c.Targets.TokenRenewAfter, *d.Targets.TokenRenewAfter},
			{"invitations.tokenTTL", c.Invitations.TokenTTL.Duration, d.Invitations.TokenTTL.Duration},
			{"invitations.summaryInterval", c.Invitations.SummaryInterval.Duration, d.Invitations.SummaryInterval.Duration},
			{"webhook.port", *c.Webhook.Port, *d.Webhook.Port},
			{"clientConnection.qps", *c.ClientConnection.QPS, *d.ClientConnection.QPS},
			{"clientConnection.burst", *c.ClientConnection.Burst, *d.ClientConnection.Burst},
			{"leaderElection.leaderElect", *c.LeaderElection.LeaderElect, *d.LeaderElection.LeaderElect},
			{"leaderElection.leaseDuration", c.LeaderElection.LeaseDuration.Duration, d.LeaderElection.LeaseDuration.Duration},
			{"leaderElection.renewDeadline", c.LeaderElection.RenewDeadline.Duration, d.LeaderElection.RenewDeadline.Duration},
			{"leaderElection.retryPeriod", c.LeaderElection.RetryPeriod.Duration, d.LeaderElection.RetryPeriod.Duration},
			{"schedulerEnabled", *c.SchedulerEnabled, *d.SchedulerEnabled},
			{"metricsBindAddress", c.MetricsBindAddress, d.MetricsBindAddress},
			{"healthProbeBindAddress", c.HealthProbeBindAddress, d.HealthProbeBindAddress},
		} {
			if f.chart != f.self {
				t.Errorf("%s: the chart renders %v, the agent's default is %v", f.name, f.chart, f.self)
			}
		}
		// What only the chart knows: its namespace, its names, that it
		// keeps the webhook configuration.
		if c.Namespace != sandbox.ReleaseNamespace || c.LeaderElection.ResourceNamespace != sandbox.ReleaseNamespace ||
			c.LeaderElection.ResourceName != "flotilla-agent" || !c.Webhook.InjectOnly || c.Webhook.ConfigurationName != "flotilla" ||
			c.Webhook.CertSecret.Name != "flotilla-agent-webhook-cert" || c.Webhook.Hosts[0] != "flotilla-agent."+sandbox.ReleaseNamespace+".svc" {
			t.Errorf("the release's own names are not in its configuration: %+v", c)
		}
	})
	t.Run("each value reaches its field", func(t *testing.T) {
		c := renderedConfig(t,
			"agent.workers=8", "agent.maxCandidates=0", "agent.electionTimeout=90s", "agent.denyAfter=0s", "agent.localOverflowAfter=0s",
			"agent.vnodeWorkers=4", "agent.virtualNodeNotReadyAfter=7s", "agent.notReadyTolerationSeconds=-1",
			"agent.kubelet.port=10260", "agent.kubelet.certSecret=kubelet-tls",
			"agent.tokenRenewAfter=0.25", "agent.tenantPodCIDRs={10.244.0.0/16,fd00::/64}",
			"agent.invitationServer=https://east.example:6443", "agent.invitationTokenTTL=1h", "agent.summaryInterval=2s",
			"webhook.port=9555", "agent.kubeAPIQPS=50", "agent.kubeAPIBurst=60",
			"agent.leaderElection.enabled=false", "agent.leaderElection.leaseDuration=30s",
			"scheduler.enabled=false", "topologyKeys={example.com/rack,topology.kubernetes.io/zone}")
		if err := agent.Validate(c); err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct {
			name      string
			got, want any
		}{
			{"placement.workers", *c.Placement.Workers, int32(8)},
			{"placement.maxCandidates", *c.Placement.MaxCandidates, int32(0)},
			{"placement.electionTimeout", c.Placement.ElectionTimeout.Duration, 90 * time.Second},
			{"placement.denyAfter", c.Placement.DenyAfter.Duration, time.Duration(0)},
			{"placement.localOverflowAfter", c.Placement.LocalOverflowAfter.Duration, time.Duration(0)},
			{"virtualNodes.workers", *c.VirtualNodes.Workers, int32(4)},
			{"virtualNodes.notReadyAfter", c.VirtualNodes.NotReadyAfter.Duration, 7 * time.Second},
			{"virtualNodes.notReadyTolerationSeconds", *c.VirtualNodes.NotReadyTolerationSeconds, int64(-1)},
			{"virtualNodes.kubelet.port", *c.VirtualNodes.Kubelet.Port, int32(10260)},
			{"virtualNodes.kubelet.certFile", c.VirtualNodes.Kubelet.CertFile, "/etc/flotilla/kubelet-tls/tls.crt"},
			{"virtualNodes.kubelet.keyFile", c.VirtualNodes.Kubelet.KeyFile, "/etc/flotilla/kubelet-tls/tls.key"},
			{"targets.tokenRenewAfter", *c.Targets.TokenRenewAfter, 0.25},
			{"targets.tenantPodCIDRs", strings.Join(c.Targets.TenantPodCIDRs, ","), "10.244.0.0/16,fd00::/64"},
			{"invitations.server", c.Invitations.Server, "https://east.example:6443"},
			{"invitations.tokenTTL", c.Invitations.TokenTTL.Duration, time.Hour},
			{"invitations.summaryInterval", c.Invitations.SummaryInterval.Duration, 2 * time.Second},
			{"webhook.port", *c.Webhook.Port, int32(9555)},
			{"clientConnection.qps", *c.ClientConnection.QPS, 50.0},
			{"clientConnection.burst", *c.ClientConnection.Burst, int32(60)},
			{"leaderElection.leaderElect", *c.LeaderElection.LeaderElect, false},
			{"leaderElection.leaseDuration", c.LeaderElection.LeaseDuration.Duration, 30 * time.Second},
			{"schedulerEnabled", *c.SchedulerEnabled, false},
			{"topologyKeys", strings.Join(c.TopologyKeys, ","), "example.com/rack,topology.kubernetes.io/zone"},
		} {
			if f.got != f.want {
				t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
			}
		}
	})
	t.Run("a value the agent refuses is named by its field", func(t *testing.T) {
		c := renderedConfig(t, "agent.maxCandidates=-1", "agent.invitationTokenTTL=5m")
		err := agent.Validate(c)
		if err == nil || !strings.Contains(err.Error(), "placement.maxCandidates") || !strings.Contains(err.Error(), "invitations.tokenTTL") {
			t.Fatalf("Validate: %v, want errors on placement.maxCandidates and invitations.tokenTTL", err)
		}
	})
}

// TestAgentInProcess runs the agent inside the test, from the chart's own
// command line and configuration file (pkg/agent's Flags, NewManager and
// Setup, as cmd/agent runs them) with its ServiceAccount's token: it
// admits an opted-in pod and places it in the target.
func TestAgentInProcess(t *testing.T) {
	t.Parallel()
	src, c2 := twoClusters(t, "4")
	ctx := t.Context()
	if _, err := sandbox.StartAgentWith(ctx, src, []*sandbox.Cluster{c2}, sandbox.ReleaseOptions{InProcess: true}); err != nil {
		t.Fatal(err)
	}
	pod, err := src.Client().CoreV1().Pods(placementNS).Create(ctx, optedInPod("in-process", "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.SchedulerName != protocol.SourceSchedulerName {
		t.Fatalf("the webhook did not admit the pod as a source pod: schedulerName %q", pod.Spec.SchedulerName)
	}
	waitPod(t, src.Client(), placementNS, pod.Name, "bound to c2's virtual node", func(p *corev1.Pod) bool {
		return p.Spec.NodeName == protocol.VirtualNodeName("", "c2")
	})
}
