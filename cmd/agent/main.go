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
		flags agent.Flags
		clean cleanupOptions
	)
	// flag.CommandLine already carries controller-runtime's --kubeconfig.
	flags.Bind(flag.CommandLine)
	clean.bind(flag.CommandLine)
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(klog.NewKlogr())
	log := ctrl.Log.WithName("agent")

	var err error
	if clean.run {
		err = runCleanup(clean)
	} else {
		err = run(&flags)
	}
	if err != nil {
		log.Error(err, "agent stopped")
		os.Exit(1)
	}
}

func run(flags *agent.Flags) error {
	c, err := flags.Config(flag.CommandLine)
	if err != nil {
		return err
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
