package agent

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlagsOverrideOnlyWhatIsGiven(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: config.flotilla.dev/v1alpha1
kind: AgentConfiguration
clusterName: east
metricsBindAddress: ":9090"
webhook:
  port: 9444
  host: 10.0.0.1
virtualNodes:
  kubelet:
    port: 10251
`), 0o600); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) (*Config, error) {
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		var f Flags
		f.Bind(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f.Config(fs)
	}
	c, err := parse("--config="+file, "--webhook-port=1234", "--kubelet-address=127.0.0.1", "--kubelet-port=0")
	if err != nil {
		t.Fatal(err)
	}
	if *c.Webhook.Port != 1234 || c.VirtualNodes.Kubelet.Address != "127.0.0.1" || *c.VirtualNodes.Kubelet.Port != 0 {
		t.Errorf("given flags not applied: webhook port %d, kubelet %s:%d", *c.Webhook.Port, c.VirtualNodes.Kubelet.Address, *c.VirtualNodes.Kubelet.Port)
	}
	// Not given: the file's, not the flag's zero value.
	if c.MetricsBindAddress != ":9090" || c.Webhook.Host != "10.0.0.1" {
		t.Errorf("flags not given changed the file's values: metrics %q, webhook host %q", c.MetricsBindAddress, c.Webhook.Host)
	}
	// An override is validated as the file is.
	if _, err := parse("--config="+file, "--kubelet-address=agent.local"); err == nil || !strings.Contains(err.Error(), "virtualNodes.kubelet.address") {
		t.Errorf("an invalid override: %v, want an error on virtualNodes.kubelet.address", err)
	}
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("no --config: %v", err)
	}
}
