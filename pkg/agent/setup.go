package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/flotilla-dev/flotilla/pkg/debugstate"
	"github.com/flotilla-dev/flotilla/pkg/gang"
	"github.com/flotilla-dev/flotilla/pkg/invitation"
	"github.com/flotilla-dev/flotilla/pkg/kubelet"
	"github.com/flotilla-dev/flotilla/pkg/local"
	"github.com/flotilla-dev/flotilla/pkg/memtrim"
	"github.com/flotilla-dev/flotilla/pkg/objects"
	"github.com/flotilla-dev/flotilla/pkg/policy"
	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/pkg/split"
	"github.com/flotilla-dev/flotilla/pkg/summary"
	"github.com/flotilla-dev/flotilla/pkg/target"
	flotillawebhook "github.com/flotilla-dev/flotilla/pkg/webhook"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

// trimFirst and trimEvery are when the agent lets go of its executable's
// unused pages: once its caches are filled, then every ten minutes.
const (
	trimFirst = 30 * time.Second
	trimEvery = 10 * time.Minute
)

// Setup adds the agent to mgr (made by NewManager from the same
// configuration): the pod webhook on every replica; on the leader the
// targets and their virtual nodes, placement, the invitations and the
// ClusterSummaries. c must be defaulted and valid (Load, Validate).
func Setup(mgr manager.Manager, c *Config) error {
	if err := Validate(c); err != nil {
		return err
	}
	// The agent runs a small part of its binary but its initializers touch
	// all of it: its read-only pages are let go once it runs, and again
	// every ten minutes (pkg/memtrim).
	if err := mgr.Add(memtrim.Periodic{First: trimFirst, Interval: trimEvery}); err != nil {
		return fmt.Errorf("adding the trimming of the executable's pages: %w", err)
	}
	// Pods travel as protobuf, as they do for kube-scheduler and the
	// controller manager: cheaper to encode for the API servers, cheaper to
	// decode for the agent. Types without protobuf fall back to JSON.
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	// /debug/state is served beside /metrics; components add to it below.
	state := debugstate.NewRegistry()
	if c.MetricsBindAddress != "0" {
		if err := mgr.AddMetricsServerExtraHandler(debugstate.Path, state); err != nil {
			return fmt.Errorf("serving %s: %w", debugstate.Path, err)
		}
	}
	// A self target with localFirst keeps the pods that fit here (the
	// webhook) and weighs this cluster against the targets (placement):
	// the view of this cluster's room watches nothing until one exists.
	view := local.NewView(kube)
	if err := mgr.Add(view); err != nil {
		return fmt.Errorf("adding the view of this cluster's room: %w", err)
	}
	if err := setupWebhook(mgr, kube, view, c); err != nil {
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
	if err := setupPlacement(mgr, cfg, kube, view, state, c); err != nil {
		return err
	}
	if err := setupInvitations(mgr, cfg, kube, c); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding ready check: %w", err)
	}
	return nil
}

// setupWebhook serves the pod mutator on every replica with the certificate
// of one Secret, rotated by the leader, and, when told how the API server
// reaches it, registers it.
func setupWebhook(mgr manager.Manager, kube kubernetes.Interface, view *local.View, c *Config) error {
	w := c.Webhook
	webhookOpts := flotillawebhook.Options{
		Secret:   types.NamespacedName{Namespace: inNamespace(c, w.CertSecret.Namespace), Name: w.CertSecret.Name},
		CertDir:  w.CertDir,
		DNSNames: w.Hosts,
		Host:     w.Host,
		Port:     int(*w.Port),

		KeepManagedFields: w.KeepManagedFields,
	}
	if s := *c.VirtualNodes.NotReadyTolerationSeconds; s >= 0 {
		webhookOpts.NotReadyTolerationSeconds = &s
	}
	if w.InjectOnly {
		webhookOpts.InjectInto = w.ConfigurationName
	} else if w.URL != "" || w.Service.Name != "" {
		webhookOpts.Registration = &flotillawebhook.Registration{
			Name:             w.ConfigurationName,
			URL:              w.URL,
			ServiceName:      w.Service.Name,
			ServiceNamespace: inNamespace(c, w.Service.Namespace),
			ServicePort:      443,
			AgentNamespace:   Namespace(c),
		}
	}
	// A PlacementPolicy's capacityType splits the pods it governs, as the
	// max-on-demand annotation does; the policies are read from the cache.
	// The split's cache runs on every replica, whose webhook places each
	// new pod of a split workload; its rebalancer on the leader.
	assigner, err := split.Setup(mgr, kube, &policy.Resolver{Reader: mgr.GetClient()})
	if err != nil {
		return fmt.Errorf("setting up the on-demand/spot split: %w", err)
	}
	webhookOpts.Split = assigner
	keeper := &local.Keeper{Reader: mgr.GetClient(), Policies: &policy.Resolver{Reader: mgr.GetClient()}, View: view}
	webhookOpts.Local = keeper
	// On the leader, it also starts the view where a self target has
	// localFirst, for placement and for the pods other replicas kept.
	overflow := &local.Overflow{View: view, Keeper: keeper, Kube: kube, Recorder: mgr.GetEventRecorder("flotilla-agent"), After: c.Placement.LocalOverflowAfter.Duration}
	if err := mgr.Add(overflow); err != nil {
		return fmt.Errorf("adding the overflow of pods kept here: %w", err)
	}
	if err := flotillawebhook.Setup(mgr, kube, webhookOpts); err != nil {
		return fmt.Errorf("setting up the webhook: %w", err)
	}
	return nil
}

// setupPlacement runs the targets controller (which connects each Target
// and ClusterTarget and runs its virtual node) and the placement controller.
// Both run on the leader only. Their state goes into /debug/state and the
// targets' into the metrics.
func setupPlacement(mgr manager.Manager, cfg *rest.Config, kube kubernetes.Interface, view *local.View, state *debugstate.Registry, c *Config) error {
	// Placement and the virtual nodes share the cache of source pods.
	informer, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("getting the source pod informer: %w", err)
	}
	sourcePods, ok := informer.(toolscache.SharedIndexInformer)
	if !ok {
		return fmt.Errorf("the source pod informer is a %T, not a SharedIndexInformer", informer)
	}
	// The nodes of this cluster, for the spread of a self target; watched
	// only once a spread asks.
	selfTopology := local.NewTopology(kube)
	if err := mgr.Add(selfTopology); err != nil {
		return err
	}
	targets := target.NewSet()
	// One registry per process: a second agent in the same process (a
	// test's) serves the first one's target metrics.
	if err := metrics.Registry.Register(target.Collector{Set: targets}); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return fmt.Errorf("registering the targets' metrics: %w", err)
	}
	if err := metrics.Registry.Register(reservation.WaitingCollector{Pods: sourcePods.GetStore(), Leading: mgr.Elected()}); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return fmt.Errorf("registering the waiting pods' metrics: %w", err)
	}
	state.Register("targets", targets.DebugState(debugstate.DefaultLimit))
	state.Register("elections", reservation.ElectionsProvider(mgr.GetCache(), targets, c.ClusterName, debugstate.DefaultLimit))
	tenantNets, err := TenantNetworks(c)
	if err != nil {
		return err
	}
	kl := c.VirtualNodes.Kubelet
	var kubeletAddress string
	if *kl.Port != 0 {
		kubeletAddress = kl.Address
	}
	if err := (&target.Controller{
		Client:          mgr.GetClient(),
		Reader:          mgr.GetAPIReader(),
		Kube:            kube,
		Self:            cfg,
		SourceCluster:   c.ClusterName,
		Namespace:       Namespace(c),
		Targets:         targets,
		SourcePods:      sourcePods,
		Recorder:        mgr.GetEventRecorder("flotilla-agent"),
		VNodeWorkers:    int(*c.VirtualNodes.Workers),
		NoScheduler:     !*c.SchedulerEnabled,
		NotReadyAfter:   c.VirtualNodes.NotReadyAfter.Duration,
		TokenRenewAfter: *c.Targets.TokenRenewAfter,
		TenantPodCIDRs:  tenantNets,
		KubeletAddress:  kubeletAddress,
		KubeletPort:     *kl.Port,
		Clock:           clock.RealClock{},
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the targets controller: %w", err)
	}
	if err := setupKubelet(mgr, kube, sourcePods, targets, c); err != nil {
		return fmt.Errorf("setting up the kubelet API: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the metadata client: %w", err)
	}
	copier, err := objects.Setup(context.Background(), mgr, meta, kube, c.ClusterName, targets)
	if err != nil {
		return fmt.Errorf("setting up the copies of ConfigMaps and Secrets: %w", err)
	}
	if err := workload.IndexSiblings(sourcePods); err != nil {
		return fmt.Errorf("indexing source pods by namespace and workload: %w", err)
	}
	if err := gang.IndexMembers(sourcePods); err != nil {
		return fmt.Errorf("indexing source pods by gang: %w", err)
	}
	if err := (&policy.StatusController{
		Client: mgr.GetClient(),
		TargetOf: func(pod *corev1.Pod) (string, bool) {
			t, ok := targets.OfPod(pod)
			if !ok {
				return "", false
			}
			return t.Name, true
		},
		TopologyKeys: func() map[string]bool {
			keys := map[string]bool{}
			for _, t := range targets.All() {
				cl := reservation.ClusterOf(t)
				for k := range cl.Labels {
					keys[k] = true
				}
				for k := range cl.Topology {
					keys[k] = true
				}
			}
			return keys
		},
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the PlacementPolicy status: %w", err)
	}
	return (&reservation.Controller{
		Client:          mgr.GetClient(),
		Reader:          mgr.GetAPIReader(),
		Kube:            kube,
		SourceCluster:   c.ClusterName,
		Targets:         targets,
		Recorder:        mgr.GetEventRecorder("flotilla-agent"),
		Workers:         int(*c.Placement.Workers),
		MaxCandidates:   int(*c.Placement.MaxCandidates),
		ElectionTimeout: c.Placement.ElectionTimeout.Duration,
		DenyAfter:       c.Placement.DenyAfter.Duration,
		Objects:         copier,
		Policies:        &policy.Resolver{Reader: mgr.GetClient()},
		SourcePods:      sourcePods.GetIndexer(),
		SelfFree:        view.Weigh,
		SelfTopology:    selfTopology.Of,
	}).SetupWithManager(mgr)
}

// setupKubelet serves the kubelet API of the virtual nodes on the leader,
// which runs them and holds the targets' connections.
func setupKubelet(mgr manager.Manager, kube kubernetes.Interface, sourcePods toolscache.SharedIndexInformer, targets *target.Set, c *Config) error {
	k := c.VirtualNodes.Kubelet
	if *k.Port == 0 {
		return nil
	}
	srv, err := kubelet.New(kubelet.Config{
		BindAddress:   k.BindAddress,
		Port:          int(*k.Port),
		Address:       k.Address,
		CertFile:      k.CertFile,
		KeyFile:       k.KeyFile,
		Kube:          kube,
		SourcePods:    sourcePods,
		Targets:       targets,
		SourceCluster: c.ClusterName,
	})
	if err != nil {
		return err
	}
	return mgr.Add(srv)
}

// setupInvitations runs the target side: Sources and ClusterSources become
// access for the invited identities, and their ClusterSummaries are kept
// current. It runs on the leader only.
func setupInvitations(mgr manager.Manager, cfg *rest.Config, kube kubernetes.Interface, c *Config) error {
	server, caData, err := invitation.ServerOf(cfg)
	if err != nil {
		return err
	}
	if c.Invitations.Server != "" {
		server = c.Invitations.Server
	}
	summaries := summary.NewPublisher(kube, mgr.GetClient(), c.Invitations.SummaryInterval.Duration, c.TopologyKeys)
	if err := mgr.Add(summaries); err != nil {
		return err
	}
	return (&invitation.Controller{
		Client:         mgr.GetClient(),
		Reader:         mgr.GetAPIReader(),
		Kube:           kube,
		AgentNamespace: Namespace(c),
		Server:         server,
		CAData:         caData,
		TokenTTL:       c.Invitations.TokenTTL.Duration,
		Summaries:      summaries,
		Recorder:       mgr.GetEventRecorder("flotilla-agent"),
		NoScheduler:    !*c.SchedulerEnabled,
		Clock:          clock.RealClock{},
	}).SetupWithManager(mgr)
}
