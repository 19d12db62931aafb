package v1alpha1

import (
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// SetDefaults fills every field left out with the agent's default.
func SetDefaults(c *AgentConfiguration) {
	if c.SchedulerEnabled == nil {
		c.SchedulerEnabled = ptr.To(true)
	}
	p := &c.Placement
	defaultInt(&p.Workers, 64)
	defaultInt(&p.MaxCandidates, 2)
	defaultDuration(&p.ElectionTimeout, time.Minute)
	defaultDuration(&p.DenyAfter, 10*time.Second)
	defaultDuration(&p.LocalOverflowAfter, 30*time.Second)

	v := &c.VirtualNodes
	defaultInt(&v.Workers, 16)
	defaultDuration(&v.NotReadyAfter, 20*time.Second)
	if v.NotReadyTolerationSeconds == nil {
		v.NotReadyTolerationSeconds = ptr.To[int64](60)
	}
	defaultInt(&v.Kubelet.Port, 10250)

	if c.Targets.TokenRenewAfter == nil {
		c.Targets.TokenRenewAfter = ptr.To(0.5)
	}

	defaultDuration(&c.Invitations.TokenTTL, 24*time.Hour)
	defaultDuration(&c.Invitations.SummaryInterval, 5*time.Second)

	w := &c.Webhook
	defaultInt(&w.Port, 9443)
	defaultString(&w.CertDir, filepath.Join(os.TempDir(), "flotilla-agent-webhook"))
	defaultString(&w.CertSecret.Name, "flotilla-agent-webhook-cert")
	if len(w.Hosts) == 0 {
		w.Hosts = []string{"localhost"}
	}
	defaultString(&w.ConfigurationName, "flotilla-agent")

	if c.ClientConnection.QPS == nil {
		c.ClientConnection.QPS = ptr.To[float64](200)
	}
	defaultInt(&c.ClientConnection.Burst, 400)

	l := &c.LeaderElection
	if l.LeaderElect == nil {
		l.LeaderElect = ptr.To(true)
	}
	defaultString(&l.ResourceName, "flotilla-agent")
	defaultDuration(&l.LeaseDuration, 15*time.Second)
	defaultDuration(&l.RenewDeadline, 10*time.Second)
	defaultDuration(&l.RetryPeriod, 2*time.Second)

	defaultString(&c.MetricsBindAddress, ":8080")
	defaultString(&c.HealthProbeBindAddress, ":8081")
}

func defaultInt(f **int32, v int32) {
	if *f == nil {
		*f = ptr.To(v)
	}
}

func defaultDuration(f **metav1.Duration, d time.Duration) {
	if *f == nil {
		*f = &metav1.Duration{Duration: d}
	}
}

func defaultString(f *string, v string) {
	if *f == "" {
		*f = v
	}
}
