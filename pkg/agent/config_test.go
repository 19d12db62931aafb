package agent

import (
	"strings"
	"testing"
	"time"
)

func TestLoadDefaultsWhatIsLeftOut(t *testing.T) {
	c, err := Load([]byte("apiVersion: config.flotilla.dev/v1alpha1\nkind: AgentConfiguration\nclusterName: east\nplacement:\n  maxCandidates: 0\n  denyAfter: 3s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(c); err != nil {
		t.Fatal(err)
	}
	// Given, including a zero that means something, stays as given.
	if *c.Placement.MaxCandidates != 0 || c.Placement.DenyAfter.Duration != 3*time.Second {
		t.Errorf("given values changed: maxCandidates %d, denyAfter %s", *c.Placement.MaxCandidates, c.Placement.DenyAfter.Duration)
	}
	// Left out takes the default, as the configuration documents it.
	if *c.Placement.Workers != 64 || c.Placement.ElectionTimeout.Duration != time.Minute || !*c.LeaderElection.LeaderElect ||
		*c.Targets.TokenRenewAfter != 0.5 || *c.ClientConnection.QPS != 200 || *c.VirtualNodes.Kubelet.Port != 10250 {
		t.Errorf("defaults not applied: %+v", c)
	}
	// The same as a configuration made from nothing but the name.
	d := Default("east")
	if *d.Placement.Workers != *c.Placement.Workers || d.Invitations.TokenTTL.Duration != 24*time.Hour {
		t.Errorf("Default differs from a loaded file's defaults")
	}
}

func TestLoadRefusesWhatItDoesNotKnow(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"unknown field, named with its path", "apiVersion: config.flotilla.dev/v1alpha1\nkind: AgentConfiguration\nclusterName: east\nplacement:\n  maxCandidate: 3\n", `unknown field "placement.maxCandidate"`},
		{"repeated field", "apiVersion: config.flotilla.dev/v1alpha1\nkind: AgentConfiguration\nclusterName: east\nclusterName: west\n", `"clusterName"`},
		{"wrong type", "apiVersion: config.flotilla.dev/v1alpha1\nkind: AgentConfiguration\nclusterName: east\nplacement:\n  workers: many\n", "placement.workers"},
		{"no kind", "clusterName: east\n", "kind"},
		{"another kind", "apiVersion: config.flotilla.dev/v1alpha1\nkind: SchedulerConfiguration\nclusterName: east\n", "SchedulerConfiguration"},
		{"another version", "apiVersion: config.flotilla.dev/v1\nkind: AgentConfiguration\nclusterName: east\n", "config.flotilla.dev/v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		field string
		set   func(*Config)
	}{
		{"clusterName", func(c *Config) { c.ClusterName = "" }},
		{"topologyKeys", func(c *Config) { c.TopologyKeys = []string{"not a label"} }},
		{"placement.workers", func(c *Config) { *c.Placement.Workers = 0 }},
		{"placement.maxCandidates", func(c *Config) { *c.Placement.MaxCandidates = -1 }},
		{"placement.electionTimeout", func(c *Config) { c.Placement.ElectionTimeout.Duration = -time.Second }},
		{"placement.denyAfter", func(c *Config) { c.Placement.DenyAfter.Duration = -time.Second }},
		{"placement.localOverflowAfter", func(c *Config) { c.Placement.LocalOverflowAfter.Duration = -time.Second }},
		{"virtualNodes.workers", func(c *Config) { *c.VirtualNodes.Workers = -2 }},
		{"virtualNodes.notReadyAfter", func(c *Config) { c.VirtualNodes.NotReadyAfter.Duration = 0 }},
		{"virtualNodes.notReadyTolerationSeconds", func(c *Config) { *c.VirtualNodes.NotReadyTolerationSeconds = -2 }},
		{"virtualNodes.kubelet.port", func(c *Config) { *c.VirtualNodes.Kubelet.Port = 70000 }},
		{"virtualNodes.kubelet.address", func(c *Config) { c.VirtualNodes.Kubelet.Address = "agent.local" }},
		{"virtualNodes.kubelet.keyFile", func(c *Config) { c.VirtualNodes.Kubelet.CertFile = "/tls.crt" }},
		{"targets.tokenRenewAfter", func(c *Config) { *c.Targets.TokenRenewAfter = 1 }},
		{"targets.tenantPodCIDRs", func(c *Config) { c.Targets.TenantPodCIDRs = []string{"10.0.0.0/33"} }},
		{"invitations.tokenTTL", func(c *Config) { c.Invitations.TokenTTL.Duration = time.Minute }},
		{"invitations.summaryInterval", func(c *Config) { c.Invitations.SummaryInterval.Duration = 0 }},
		{"webhook.port", func(c *Config) { *c.Webhook.Port = 0 }},
		{"webhook.hosts[1]", func(c *Config) { c.Webhook.Hosts = []string{"localhost", "127.0.0.1"} }},
		{"clientConnection.qps", func(c *Config) { *c.ClientConnection.QPS = 0 }},
		{"clientConnection.burst", func(c *Config) { *c.ClientConnection.Burst = 0 }},
		{"leaderElection.resourceName", func(c *Config) { c.LeaderElection.ResourceName = "" }},
		{"leaderElection.renewDeadline", func(c *Config) { c.LeaderElection.RenewDeadline.Duration = time.Minute }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			c := Default("east")
			if err := Validate(c); err != nil {
				t.Fatalf("the defaults do not validate: %v", err)
			}
			tc.set(c)
			err := Validate(c)
			if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Fatalf("Validate: %v, want an error on %s", err, tc.field)
			}
		})
	}
	// Leader election off: its timings are not checked.
	c := Default("east")
	*c.LeaderElection.LeaderElect = false
	c.LeaderElection.RenewDeadline.Duration = time.Hour
	if err := Validate(c); err != nil {
		t.Errorf("leader election off, its timings still checked: %v", err)
	}
}
