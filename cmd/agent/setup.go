package main

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/flotilla-dev/flotilla/pkg/debugstate"
	"github.com/flotilla-dev/flotilla/pkg/invitation"
	"github.com/flotilla-dev/flotilla/pkg/local"
	"github.com/flotilla-dev/flotilla/pkg/objects"
	"github.com/flotilla-dev/flotilla/pkg/policy"
	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/pkg/summary"
	"github.com/flotilla-dev/flotilla/pkg/target"
	flotillawebhook "github.com/flotilla-dev/flotilla/pkg/webhook"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

// setupWebhook serves the pod mutator on every replica with the certificate
// of one Secret, rotated by the leader, and, when told how the API server
// reaches it, registers it.
func setupWebhook(mgr manager.Manager, kube kubernetes.Interface, view *local.View, opts options) error {
	webhookOpts := flotillawebhook.Options{
		Secret:   types.NamespacedName{Namespace: leaderElectionNamespace(opts.webhookCertSecNS), Name: opts.webhookCertSecret},
		CertDir:  opts.webhookCertDir,
		DNSNames: splitList(opts.webhookSANs),
		Host:     opts.webhookHost,
		Port:     opts.webhookPort,
	}
	if opts.notReadyToleration >= 0 {
		webhookOpts.NotReadyTolerationSeconds = &opts.notReadyToleration
	}
	if opts.webhookInjectOnly {
		webhookOpts.InjectInto = opts.webhookConfigName
	} else if opts.webhookURL != "" || opts.webhookService != "" {
		webhookOpts.Registration = &flotillawebhook.Registration{
			Name:             opts.webhookConfigName,
			URL:              opts.webhookURL,
			ServiceName:      opts.webhookService,
			ServiceNamespace: leaderElectionNamespace(opts.webhookServiceNS),
			ServicePort:      443,
			AgentNamespace:   leaderElectionNamespace(opts.namespace),
		}
	}
	// A PlacementPolicy's capacityType splits the pods it governs, as the
	// max-on-demand annotation does; the policies are read from the cache.
	assigner, err := setupSplit(mgr, kube, &policy.Resolver{Reader: mgr.GetClient()})
	if err != nil {
		return err
	}
	webhookOpts.Split = assigner
	keeper := &local.Keeper{Reader: mgr.GetClient(), Policies: &policy.Resolver{Reader: mgr.GetClient()}, View: view}
	webhookOpts.Local = keeper
	// On the leader, it also starts the view where a self target has
	// localFirst, for placement and for the pods other replicas kept.
	overflow := &local.Overflow{View: view, Keeper: keeper, Kube: kube, Recorder: mgr.GetEventRecorder("flotilla-agent"), After: opts.overflowAfter}
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
func setupPlacement(mgr manager.Manager, cfg *rest.Config, kube kubernetes.Interface, view *local.View, state *debugstate.Registry, opts options) error {
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
	if err := metrics.Registry.Register(target.Collector{Set: targets}); err != nil {
		return fmt.Errorf("registering the targets' metrics: %w", err)
	}
	state.Register("targets", targets.DebugState(debugstate.DefaultLimit))
	state.Register("elections", reservation.ElectionsProvider(mgr.GetCache(), targets, opts.clusterName, debugstate.DefaultLimit))
	kubeletAddress, kubeletPort := opts.kubelet.published()
	tenantNets, err := opts.tenantNetworks()
	if err != nil {
		return err
	}
	if err := (&target.Controller{
		Client:          mgr.GetClient(),
		Reader:          mgr.GetAPIReader(),
		Kube:            kube,
		Self:            cfg,
		SourceCluster:   opts.clusterName,
		Namespace:       leaderElectionNamespace(opts.namespace),
		Targets:         targets,
		SourcePods:      sourcePods,
		Recorder:        mgr.GetEventRecorder("flotilla-agent"),
		VNodeWorkers:    opts.vnodeWorkers,
		NoScheduler:     !opts.schedulerEnabled,
		NotReadyAfter:   opts.notReadyAfter,
		TokenRenewAfter: opts.tokenRenewAfter,
		TenantPodCIDRs:  tenantNets,
		KubeletAddress:  kubeletAddress,
		KubeletPort:     kubeletPort,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the targets controller: %w", err)
	}
	if err := setupKubelet(mgr, kube, sourcePods, targets, opts); err != nil {
		return fmt.Errorf("setting up the kubelet API: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the metadata client: %w", err)
	}
	copier, err := objects.Setup(context.Background(), mgr, meta, kube, opts.clusterName, targets)
	if err != nil {
		return fmt.Errorf("setting up the copies of ConfigMaps and Secrets: %w", err)
	}
	if err := workload.IndexSiblings(sourcePods); err != nil {
		return fmt.Errorf("indexing source pods by namespace and workload: %w", err)
	}
	if err := (&policy.StatusController{
		Client: mgr.GetClient(),
		TargetOf: func(node string) (string, bool) {
			t, ok := targets.ByVirtualNode(node)
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
		Kube:            kube,
		SourceCluster:   opts.clusterName,
		Targets:         targets,
		Recorder:        mgr.GetEventRecorder("flotilla-agent"),
		Workers:         opts.workers,
		MaxCandidates:   opts.maxCands,
		ElectionTimeout: opts.electionTimeout,
		DenyAfter:       opts.denyAfter,
		Objects:         copier,
		Policies:        &policy.Resolver{Reader: mgr.GetClient()},
		SourcePods:      sourcePods.GetIndexer(),
		SelfFree:        view.Free,
		SelfTopology:    selfTopology.Values,
	}).SetupWithManager(mgr)
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

// setupInvitations runs the target side: Sources and ClusterSources become
// access for the invited identities, and their ClusterSummaries are kept
// current. It runs on the leader only.
func setupInvitations(mgr manager.Manager, cfg *rest.Config, kube kubernetes.Interface, opts options) error {
	server, caData, err := invitation.ServerOf(cfg)
	if err != nil {
		return err
	}
	if opts.invitationServer != "" {
		server = opts.invitationServer
	}
	summaries := summary.NewPublisher(kube, mgr.GetClient(), opts.summaryInterval, opts.topology())
	if err := mgr.Add(summaries); err != nil {
		return err
	}
	return (&invitation.Controller{
		Client:         mgr.GetClient(),
		Reader:         mgr.GetAPIReader(),
		Kube:           kube,
		AgentNamespace: leaderElectionNamespace(opts.namespace),
		Server:         server,
		CAData:         caData,
		TokenTTL:       opts.invitationTokenTTL,
		Summaries:      summaries,
		Recorder:       mgr.GetEventRecorder("flotilla-agent"),
		NoScheduler:    !opts.schedulerEnabled,
	}).SetupWithManager(mgr)
}
