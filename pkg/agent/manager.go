package agent

import (
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/slim"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

// Scheme holds the kinds the agent reads and writes: Kubernetes' own and
// Flotilla's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// NewManager makes the agent's manager for the cluster that restCfg
// reaches, at the configuration's rate of queries.
func NewManager(restCfg *rest.Config, c *Config) (manager.Manager, error) {
	cfg := rest.CopyConfig(restCfg)
	cfg.QPS, cfg.Burst = float32(*c.ClientConnection.QPS), int(*c.ClientConnection.Burst)
	// No gzip: from 1.37 an API server compresses every event of a watch
	// whose client accepts gzip (WatchListCompression), one flush at a
	// time, so a busy source API server spent about 3 % of its CPU
	// compressing watch events and the agent 4 % of its own inflating
	// them, for a connection within the cluster.
	cfg.DisableCompression = true
	// No content type: the manager's cache and client speak protobuf for
	// the API's own kinds (controller-runtime's choice when none is set) and
	// JSON for Flotilla's, which have no protobuf. Its watch of the source
	// pods in JSON cost the API server an encoding of every event in JSON
	// for the agent alone, beside the protobuf one it shares between
	// kube-scheduler, the controller manager and the kubelets.
	l := c.LeaderElection
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: Scheme(),
		// The agent caches only source pods, not every pod of the cluster,
		// and of each only what placement and the virtual nodes read. A
		// source pod is known by the scheduler name the webhook gave it,
		// which cannot change: the opt-in label can, and a pod that lost
		// it would look deleted (its candidates and running delegate with
		// it).
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}: {
					Field:     fields.OneTermEqualSelector("spec.schedulerName", protocol.SourceSchedulerName),
					Transform: slim.SourcePod,
				},
				// Of the nodes, only the virtual ones, whose cordons the
				// targets follow; not every node of a large cluster.
				&corev1.Node{}: {Label: virtualNodes()},
			},
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    c.Webhook.Host,
			Port:    int(*c.Webhook.Port),
			CertDir: c.Webhook.CertDir,
		}),
		Metrics:                       metricsserver.Options{BindAddress: c.MetricsBindAddress},
		HealthProbeBindAddress:        c.HealthProbeBindAddress,
		PprofBindAddress:              c.PprofBindAddress,
		LeaderElection:                *l.LeaderElect,
		LeaderElectionID:              l.ResourceName,
		LeaderElectionNamespace:       inNamespace(c, l.ResourceNamespace),
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &l.LeaseDuration.Duration,
		RenewDeadline:                 &l.RenewDeadline.Duration,
		RetryPeriod:                   &l.RetryPeriod.Duration,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// virtualNodes selects the virtual nodes of Flotilla's targets.
func virtualNodes() labels.Selector {
	isVirtual, _ := labels.NewRequirement(vnode.TypeLabel, selection.Equals, []string{vnode.TypeValue})
	ofTarget, _ := labels.NewRequirement(vnode.TargetLabel, selection.Exists, nil)
	return labels.NewSelector().Add(*isVirtual, *ofTarget)
}

// namespaceOr is ns, or when it is empty the namespace the agent runs in,
// or kube-system outside a cluster.
func namespaceOr(ns string) string {
	if ns != "" {
		return ns
	}
	if own, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(own) > 0 {
		return string(own)
	}
	return "kube-system"
}

// Namespace is the agent's namespace: the configuration's, or the one it
// runs in, or kube-system outside a cluster.
func Namespace(c *Config) string { return namespaceOr(c.Namespace) }

// inNamespace is ns, or the agent's namespace when it is empty.
func inNamespace(c *Config, ns string) string {
	if ns != "" {
		return ns
	}
	return Namespace(c)
}
