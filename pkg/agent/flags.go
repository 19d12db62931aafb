package agent

import (
	"errors"
	"flag"
	"fmt"
)

// Flags are the agent's command line: its configuration file, and what one
// process overrides of it (where it listens, the address it publishes).
// Each override applies only when given.
type Flags struct {
	ConfigFile string

	metricsAddr, probeAddr, pprofAddr string
	webhookPort                       int
	webhookHost, webhookCertDir       string
	kubeletPort                       int
	kubeletBindAddress                string
	kubeletAddress                    string
}

// Bind adds the flags to fs.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.StringVar(&f.ConfigFile, "config", "", "The agent's configuration file: a config.flotilla.dev/v1alpha1 AgentConfiguration (the chart renders it; docs/configuration.md).")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", "", "Overrides metricsBindAddress: where the Prometheus metrics are served; \"0\" disables them.")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", "", "Overrides healthProbeBindAddress: where /healthz and /readyz are served.")
	fs.StringVar(&f.pprofAddr, "pprof-bind-address", "", "Overrides pprofBindAddress: where Go's /debug/pprof profiles are served.")
	fs.IntVar(&f.webhookPort, "webhook-port", 0, "Overrides webhook.port: the port of the pod admission webhook.")
	fs.StringVar(&f.webhookHost, "webhook-bind-host", "", "Overrides webhook.host: the address the webhook binds to.")
	fs.StringVar(&f.webhookCertDir, "webhook-cert-dir", "", "Overrides webhook.certDir: the writable folder of the webhook's serving certificate.")
	fs.IntVar(&f.kubeletPort, "kubelet-port", 0, "Overrides virtualNodes.kubelet.port: the port of the virtual nodes' kubelet API, published in their daemonEndpoints.")
	fs.StringVar(&f.kubeletBindAddress, "kubelet-bind-address", "", "Overrides virtualNodes.kubelet.bindAddress: the address the kubelet API binds to.")
	fs.StringVar(&f.kubeletAddress, "kubelet-address", "", "Overrides virtualNodes.kubelet.address: the IP the virtual nodes publish, where the API server reaches the kubelet API (the agent pod's IP; the chart passes $(POD_IP)).")
}

// Config loads the configuration file, applies the overrides given on fs
// (parsed, with these flags bound) and validates the result.
func (f *Flags) Config(fs *flag.FlagSet) (*Config, error) {
	if f.ConfigFile == "" {
		return nil, errors.New("--config is required: the agent's configuration file")
	}
	c, err := LoadFile(f.ConfigFile)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for name, s := range map[string]struct{ from, to *string }{
		"metrics-bind-address":      {&f.metricsAddr, &c.MetricsBindAddress},
		"health-probe-bind-address": {&f.probeAddr, &c.HealthProbeBindAddress},
		"pprof-bind-address":        {&f.pprofAddr, &c.PprofBindAddress},
		"webhook-bind-host":         {&f.webhookHost, &c.Webhook.Host},
		"webhook-cert-dir":          {&f.webhookCertDir, &c.Webhook.CertDir},
		"kubelet-bind-address":      {&f.kubeletBindAddress, &c.VirtualNodes.Kubelet.BindAddress},
		"kubelet-address":           {&f.kubeletAddress, &c.VirtualNodes.Kubelet.Address},
	} {
		if set[name] {
			*s.to = *s.from
		}
	}
	if set["webhook-port"] {
		*c.Webhook.Port = int32(f.webhookPort)
	}
	if set["kubelet-port"] {
		*c.VirtualNodes.Kubelet.Port = int32(f.kubeletPort)
	}
	if err := Validate(c); err != nil {
		return nil, fmt.Errorf("%s: %w", f.ConfigFile, err)
	}
	return c, nil
}
