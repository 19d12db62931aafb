// Command agent is Flotilla's per-cluster agent: a controller-runtime manager
// that hosts the webhook, the controllers and the virtual nodes of one cluster.
//
// Only one replica is active at a time (leader election on a Lease); every
// replica serves health and metrics.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/cleanup"
	"github.com/flotilla-dev/flotilla/pkg/debugstate"
	"github.com/flotilla-dev/flotilla/pkg/local"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/slim"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

type options struct {
	clusterName string
	namespace   string

	cleanup            bool
	cleanupDeployments string
	cleanupLeases      string

	invitationServer   string
	invitationTokenTTL time.Duration
	summaryInterval    time.Duration
	topologyKeys       string
	tokenRenewAfter    float64
	tenantPodCIDRs     string
	workers            int
	vnodeWorkers       int
	maxCands           int
	schedulerEnabled   bool
	electionTimeout    time.Duration
	denyAfter          time.Duration
	notReadyToleration int64
	notReadyAfter      time.Duration
	overflowAfter      time.Duration

	kubelet kubeletOptions

	webhookPort       int
	webhookHost       string
	webhookCertDir    string
	webhookCertSecret string
	webhookCertSecNS  string
	webhookURL        string
	webhookSANs       string
	webhookService    string
	webhookServiceNS  string
	webhookConfigName string
	webhookInjectOnly bool

	kubeAPIQPS   float64
	kubeAPIBurst int

	metricsAddr             string
	probeAddr               string
	pprofAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	leaderElectionID        string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
}

func (o *options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.clusterName, "cluster-name", "", "Name of this cluster as its targets know it; labels every candidate it sends. Required.")
	fs.StringVar(&o.namespace, "namespace", "", "The agent's namespace: where a ClusterTarget's kubeconfig Secret is looked for when its reference names none, and where a ClusterSource's managed ServiceAccount and its kubeconfig Secret are made; defaults to the namespace the agent runs in, or kube-system outside a cluster.")
	fs.BoolVar(&o.cleanup, "cleanup", false, "Instead of running, remove what the agent made that its Helm release does not own (virtual nodes, finalizers, the access granted to sources, ClusterSummaries, Leases) and exit: the chart's pre-delete hook.")
	fs.StringVar(&o.cleanupDeployments, "cleanup-deployments", "", "With --cleanup: comma-separated Deployments of --namespace scaled to zero first, so that nothing makes those objects again.")
	fs.StringVar(&o.cleanupLeases, "cleanup-leases", "", "With --cleanup: comma-separated leader-election Leases of --namespace to delete.")
	fs.StringVar(&o.invitationServer, "invitation-server", "", "URL at which sources reach this cluster's API server, written into the kubeconfig of each invitation's managed ServiceAccount; defaults to the server the agent itself talks to.")
	fs.DurationVar(&o.invitationTokenTTL, "invitation-token-ttl", 24*time.Hour, "Lifetime of the token in the kubeconfig written for an invitation's managed ServiceAccount (at least 10m, the API server's minimum); the source renews it itself before it expires.")
	fs.DurationVar(&o.summaryInterval, "summary-interval", 5*time.Second, "How often at most each ClusterSummary is written, however fast nodes and pods change.")
	fs.StringVar(&o.topologyKeys, "topology-keys", "", "Comma-separated node labels the ClusterSummary reports free capacity by; give the scheduler's FlotillaCandidate plugin the same topologyKeys (the chart's topologyKeys sets both). Empty: "+strings.Join(protocol.DefaultTopologyKeys, ",")+".")
	fs.Float64Var(&o.tokenRenewAfter, "token-renew-after", 0.5, "Share of a target token's lifetime after which the source renews it (TokenRequest on its own ServiceAccount), between 0 and 1.")
	fs.StringVar(&o.tenantPodCIDRs, "tenant-pod-cidrs", "", "Comma-separated networks inside which a namespaced Target's spec.podCIDRs must lie (a tenant's target could otherwise make this cluster's Services send traffic to any address). Empty: a namespaced Target may name none, and its pods show no pod IP.")
	fs.IntVar(&o.workers, "workers", 64, "Source pods placed concurrently. Most of a placement is waiting on API calls, so this is worth more than the cores.")
	fs.IntVar(&o.vnodeWorkers, "vnode-workers", 16, "Per virtual node: source pods whose status is mirrored concurrently.")
	fs.Int64Var(&o.notReadyToleration, "not-ready-toleration-seconds", 60, "How long a source pod stays on a virtual node that is NotReady (its target's API does not answer) before it is evicted and its controller recreates it elsewhere; the webhook writes it as the pod's node.kubernetes.io/not-ready toleration unless the pod has one of its own. -1: never evicted.")
	fs.DurationVar(&o.notReadyAfter, "virtual-node-not-ready-after", 20*time.Second, "How long a target's API must fail to answer before its virtual node turns NotReady.")
	fs.DurationVar(&o.overflowAfter, "local-overflow-after", 30*time.Second, "With a self target's localFirst: how long a pod kept in this cluster may wait with no node for it before the agent evicts it, so that its controller makes a pod that goes through the targets (a pod without a controller only gets an Event). 0: never.")
	fs.DurationVar(&o.electionTimeout, "election-timeout", time.Minute, "How long an elected candidate may stay unbound while its target answers before the source revokes it (deletes it unless it bound meanwhile) and elects another target; longer than the targets' Permit timeout. 0: never.")
	fs.DurationVar(&o.denyAfter, "deny-after", 10*time.Second, "How long another target's candidate must have stood elected and unbound before the source denies the pod's other candidates, so that they hold no node in their targets; it lifts the denials if that election ends without binding. 0: never.")
	fs.IntVar(&o.maxCands, "max-candidates", 2, "Targets that get a candidate of a pod at first (0: all). They are drawn by a hash of the pod's UID weighted by each target's room for the pod (its ClusterSummary), how fast and how often it found a node for this agent's candidates, and the placement policy's preferences; the set widens by this many while every target in it cannot run the pod.")
	fs.BoolVar(&o.schedulerEnabled, "scheduler-enabled", true, "This cluster runs Flotilla's scheduler (the chart's scheduler.enabled), which schedules the candidates of invited sources and of a self target. false: the agent reports every invitation (Source, ClusterSource) and a self target as not Ready with reason SchedulerDisabled, since nothing here would schedule their candidates.")
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 200, "Sustained queries per second of the agent to each API server (its own and each target's).")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 400, "Burst of queries of the agent to each API server.")
	o.kubelet.bind(fs)
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port of the pod admission webhook.")
	fs.StringVar(&o.webhookHost, "webhook-bind-host", "", "Address the webhook binds to; empty means all.")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", filepath.Join(os.TempDir(), "flotilla-agent-webhook"), "Writable folder where the agent copies the serving certificate from --webhook-cert-secret-name for its webhook server, which reloads it when it changes.")
	fs.StringVar(&o.webhookCertSecret, "webhook-cert-secret-name", "flotilla-agent-webhook-cert", "Secret holding the webhook's CA and serving certificate, which every replica serves; created empty when missing, filled and rotated by the leader, whose CA goes into the webhook configuration.")
	fs.StringVar(&o.webhookCertSecNS, "webhook-cert-secret-namespace", "", "Namespace of --webhook-cert-secret-name; defaults to the namespace the agent runs in, or kube-system outside a cluster.")
	fs.StringVar(&o.webhookSANs, "webhook-cert-hosts", "localhost", "Comma-separated DNS names of the webhook's serving certificate (in a cluster, <service>.<namespace>.svc); no IP addresses, so --webhook-url must name one of them.")
	fs.StringVar(&o.webhookURL, "webhook-url", "", "URL the API server calls the webhook at (an agent outside the cluster); when empty, --webhook-service-name is used.")
	fs.StringVar(&o.webhookService, "webhook-service-name", "", "Service in front of the agent's webhook; with --webhook-url empty and this empty, the agent does not register its webhook.")
	fs.StringVar(&o.webhookServiceNS, "webhook-service-namespace", "", "Namespace of --webhook-service-name; defaults to the agent's namespace.")
	fs.StringVar(&o.webhookConfigName, "webhook-configuration-name", "flotilla-agent", "Name of the MutatingWebhookConfiguration the agent keeps up to date.")
	fs.BoolVar(&o.webhookInjectOnly, "webhook-inject-only", false, "The MutatingWebhookConfiguration --webhook-configuration-name is kept by someone else (the Helm chart, so that uninstalling removes it): the agent only injects its CA into it, and --webhook-url and --webhook-service-name are not used.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; \"0\" disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz endpoints bind to.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address of Go's /debug/pprof profiles; empty disables them.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect one active agent per cluster through a Lease, so that replicas can stand by.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease; defaults to the namespace the agent runs in, or kube-system outside a cluster.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "flotilla-agent", "Name of the leader-election Lease.")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long standby agents wait before taking over a lease that was not renewed.")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the active agent keeps trying to renew its lease before it steps down.")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often agents try to acquire or renew the lease.")
}

func (o *options) validate() error {
	if o.clusterName == "" {
		return errors.New("--cluster-name is required: it names this cluster's candidates in its targets")
	}
	if o.invitationTokenTTL < 10*time.Minute {
		return fmt.Errorf("--invitation-token-ttl %s: the API server issues tokens of 10m or more", o.invitationTokenTTL)
	}
	if _, err := o.tenantNetworks(); err != nil {
		return err
	}
	if err := protocol.ValidateTopologyKeys(o.topology()); err != nil {
		return fmt.Errorf("--topology-keys: %w", err)
	}
	if o.tokenRenewAfter <= 0 || o.tokenRenewAfter >= 1 {
		return fmt.Errorf("--token-renew-after %g: want a share of the lifetime between 0 and 1", o.tokenRenewAfter)
	}
	if o.notReadyToleration < -1 {
		return fmt.Errorf("--not-ready-toleration-seconds %d: want seconds, or -1 for never", o.notReadyToleration)
	}
	if o.notReadyAfter <= 0 {
		return fmt.Errorf("--virtual-node-not-ready-after %s: want a positive duration", o.notReadyAfter)
	}
	if o.overflowAfter < 0 {
		return fmt.Errorf("--local-overflow-after %s: want a duration, or 0 for never", o.overflowAfter)
	}
	if err := o.kubelet.validate(); err != nil {
		return err
	}
	if o.leaderElect && o.leaderElectionID == "" {
		return errors.New("--leader-election-id must not be empty when --leader-elect is set")
	}
	if o.leaderElect && !(o.retryPeriod < o.renewDeadline && o.renewDeadline < o.leaseDuration) {
		return fmt.Errorf("leader election needs retry period (%s) < renew deadline (%s) < lease duration (%s)", o.retryPeriod, o.renewDeadline, o.leaseDuration)
	}
	return nil
}

func main() {
	var opts options
	// flag.CommandLine already carries controller-runtime's --kubeconfig.
	opts.bind(flag.CommandLine)
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(klog.NewKlogr())
	log := ctrl.Log.WithName("agent")

	if err := run(opts); err != nil {
		log.Error(err, "agent stopped")
		os.Exit(1)
	}
}

func run(opts options) error {
	if opts.cleanup {
		return runCleanup(opts)
	}
	if err := opts.validate(); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(opts.kubeAPIQPS), opts.kubeAPIBurst
	// Pods travel as protobuf, as they do for kube-scheduler and the
	// controller manager: cheaper to encode for the API servers, cheaper to
	// decode for the agent. Types without protobuf fall back to JSON.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	// The manager's client also writes Flotilla's own kinds, which have no
	// protobuf: it sends JSON and still reads protobuf where there is one.
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.ContentType = runtime.ContentTypeJSON
	// /debug/state is served beside /metrics; components add to it below.
	state := debugstate.NewRegistry()
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme: scheme,
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
			},
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    opts.webhookHost,
			Port:    opts.webhookPort,
			CertDir: opts.webhookCertDir,
		}),
		Metrics: metricsserver.Options{
			BindAddress:   opts.metricsAddr,
			ExtraHandlers: map[string]http.Handler{debugstate.Path: state},
		},
		HealthProbeBindAddress:        opts.probeAddr,
		PprofBindAddress:              opts.pprofAddr,
		LeaderElection:                opts.leaderElect,
		LeaderElectionID:              opts.leaderElectionID,
		LeaderElectionNamespace:       leaderElectionNamespace(opts.leaderElectionNamespace),
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &opts.leaseDuration,
		RenewDeadline:                 &opts.renewDeadline,
		RetryPeriod:                   &opts.retryPeriod,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	// A self target with localFirst keeps the pods that fit here (the
	// webhook) and weighs this cluster against the targets (placement):
	// the view of this cluster's room watches nothing until one exists.
	view := local.NewView(kube)
	if err := mgr.Add(view); err != nil {
		return fmt.Errorf("adding the view of this cluster's room: %w", err)
	}
	if err := setupWebhook(mgr, kube, view, opts); err != nil {
		return err
	}
	state.Register("leader", func() any {
		select {
		case <-mgr.Elected():
			return true
		default:
			return false
		}
	})
	if err := setupPlacement(mgr, cfg, kube, view, state, opts); err != nil {
		return err
	}
	if err := setupInvitations(mgr, cfg, kube, opts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding ready check: %w", err)
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// leaderElectionNamespace falls back to kube-system outside a cluster, where
// controller-runtime cannot discover the pod's namespace.
func leaderElectionNamespace(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(ns) > 0 {
		return string(ns)
	}
	return "kube-system"
}

// runCleanup is --cleanup: the chart's pre-delete hook.
func runCleanup(opts options) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	return cleanup.Run(ctx, cl, cl, kube, cleanup.Options{
		Namespace:   leaderElectionNamespace(opts.namespace),
		Deployments: splitList(opts.cleanupDeployments),
		Leases:      splitList(opts.cleanupLeases),
	})
}

// tenantNetworks parses --tenant-pod-cidrs.
func (o *options) tenantNetworks() ([]netip.Prefix, error) {
	if strings.TrimSpace(o.tenantPodCIDRs) == "" {
		return nil, nil
	}
	nets, err := vnode.ParsePodCIDRs(strings.Split(o.tenantPodCIDRs, ","))
	if err != nil {
		return nil, fmt.Errorf("--tenant-pod-cidrs: %w", err)
	}
	return nets, nil
}

// topology returns --topology-keys as a list, nil (the default keys) when
// it is empty.
func (o *options) topology() []string {
	if strings.TrimSpace(o.topologyKeys) == "" {
		return nil
	}
	return splitList(o.topologyKeys)
}
