// Command agent is Flotilla's per-cluster agent: a controller-runtime manager
// that hosts the webhook, the controllers and the virtual nodes of one cluster.
//
// It reads its configuration file (--config, a config.flotilla.dev/v1alpha1
// AgentConfiguration, which the chart renders); its flags only override,
// per process, where it listens and what it publishes. Only one replica is
// active at a time (leader election on a Lease); every replica serves
// health and metrics.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/pkg/agent"
	"github.com/flotilla-dev/flotilla/pkg/cleanup"
)

// overrides are the flags that change, for this process only, what its
// configuration file says: where it listens and the address it publishes.
// Each applies only when given.
type overrides struct {
	metricsAddr, probeAddr, pprofAddr string
	webhookPort                       int
	webhookHost, webhookCertDir       string
	kubeletPort                       int
	kubeletBindAddress                string
	kubeletAddress                    string
}

func (o *overrides) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "", "Overrides metricsBindAddress: where the Prometheus metrics are served; \"0\" disables them.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", "", "Overrides healthProbeBindAddress: where /healthz and /readyz are served.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Overrides pprofBindAddress: where Go's /debug/pprof profiles are served.")
	fs.IntVar(&o.webhookPort, "webhook-port", 0, "Overrides webhook.port: the port of the pod admission webhook.")
	fs.StringVar(&o.webhookHost, "webhook-bind-host", "", "Overrides webhook.host: the address the webhook binds to.")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "", "Overrides webhook.certDir: the writable folder of the webhook's serving certificate.")
	fs.IntVar(&o.kubeletPort, "kubelet-port", 0, "Overrides virtualNodes.kubelet.port: the port of the virtual nodes' kubelet API, published in their daemonEndpoints.")
	fs.StringVar(&o.kubeletBindAddress, "kubelet-bind-address", "", "Overrides virtualNodes.kubelet.bindAddress: the address the kubelet API binds to.")
	fs.StringVar(&o.kubeletAddress, "kubelet-address", "", "Overrides virtualNodes.kubelet.address: the IP the virtual nodes publish, where the API server reaches the kubelet API (the agent pod's IP; the chart passes $(POD_IP)).")
}

// apply sets the overrides given on the command line (set) into c.
func (o *overrides) apply(set map[string]bool, c *agent.Config) {
	str := map[string]struct{ from, to *string }{
		"metrics-bind-address":      {&o.metricsAddr, &c.MetricsBindAddress},
		"health-probe-bind-address": {&o.probeAddr, &c.HealthProbeBindAddress},
		"pprof-bind-address":        {&o.pprofAddr, &c.PprofBindAddress},
		"webhook-bind-host":         {&o.webhookHost, &c.Webhook.Host},
		"webhook-cert-dir":          {&o.webhookCertDir, &c.Webhook.CertDir},
		"kubelet-bind-address":      {&o.kubeletBindAddress, &c.VirtualNodes.Kubelet.BindAddress},
		"kubelet-address":           {&o.kubeletAddress, &c.VirtualNodes.Kubelet.Address},
	}
	for name, f := range str {
		if set[name] {
			*f.to = *f.from
		}
	}
	if set["webhook-port"] {
		*c.Webhook.Port = int32(o.webhookPort)
	}
	if set["kubelet-port"] {
		*c.VirtualNodes.Kubelet.Port = int32(o.kubeletPort)
	}
}

// cleanupOptions are the flags of --cleanup, the chart's pre-delete hook.
type cleanupOptions struct {
	run         bool
	namespace   string
	deployments string
	leases      string
}

func (o *cleanupOptions) bind(fs *flag.FlagSet) {
	fs.BoolVar(&o.run, "cleanup", false, "Instead of running, remove what the agent made that its Helm release does not own (virtual nodes, finalizers, the access granted to sources, ClusterSummaries, Leases) and exit: the chart's pre-delete hook. Reads no configuration file.")
	fs.StringVar(&o.namespace, "namespace", "", "With --cleanup: the agent's namespace; defaults to the namespace this runs in, or kube-system outside a cluster.")
	fs.StringVar(&o.deployments, "cleanup-deployments", "", "With --cleanup: comma-separated Deployments of --namespace scaled to zero first, so that nothing makes those objects again.")
	fs.StringVar(&o.leases, "cleanup-leases", "", "With --cleanup: comma-separated leader-election Leases of --namespace to delete.")
}

func main() {
	var (
		configFile string
		over       overrides
		clean      cleanupOptions
	)
	// flag.CommandLine already carries controller-runtime's --kubeconfig.
	flag.StringVar(&configFile, "config", "", "The agent's configuration file: a config.flotilla.dev/v1alpha1 AgentConfiguration (the chart renders it). Required unless --cleanup.")
	over.bind(flag.CommandLine)
	clean.bind(flag.CommandLine)
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(klog.NewKlogr())
	log := ctrl.Log.WithName("agent")

	var err error
	if clean.run {
		err = runCleanup(clean)
	} else {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		err = run(configFile, set, &over)
	}
	if err != nil {
		log.Error(err, "agent stopped")
		os.Exit(1)
	}
}

func run(configFile string, set map[string]bool, over *overrides) error {
	if configFile == "" {
		return errors.New("--config is required: the agent's configuration file")
	}
	c, err := agent.LoadFile(configFile)
	if err != nil {
		return err
	}
	over.apply(set, c)
	if err := agent.Validate(c); err != nil {
		return fmt.Errorf("%s: %w", configFile, err)
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := agent.NewManager(restCfg, c)
	if err != nil {
		return err
	}
	if err := agent.Setup(mgr, c); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// runCleanup is --cleanup: the chart's pre-delete hook.
func runCleanup(o cleanupOptions) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: agent.Scheme()})
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return cleanup.Run(ctrl.SetupSignalHandler(), cl, cl, kube, cleanup.Options{
		Namespace:   agent.Namespace(&agent.Config{Namespace: o.namespace}),
		Deployments: splitList(o.deployments),
		Leases:      splitList(o.leases),
	})
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
