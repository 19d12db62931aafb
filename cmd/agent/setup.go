package main

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/pkg/target"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
	flotillawebhook "github.com/flotilla-dev/flotilla/pkg/webhook"
)

// setupWebhook serves the pod mutator on every replica with the certificate
// of one Secret, rotated by the leader, and, when told how the API server
// reaches it, registers it.
func setupWebhook(mgr manager.Manager, kube kubernetes.Interface, opts options) error {
	webhookOpts := flotillawebhook.Options{
		Secret:   types.NamespacedName{Namespace: leaderElectionNamespace(opts.webhookCertSecNS), Name: opts.webhookCertSecret},
		CertDir:  opts.webhookCertDir,
		DNSNames: splitList(opts.webhookSANs),
		Host:     opts.webhookHost,
		Port:     opts.webhookPort,
	}
	if opts.webhookURL != "" || opts.webhookService != "" {
		webhookOpts.Registration = &flotillawebhook.Registration{
			Name:             opts.webhookConfigName,
			URL:              opts.webhookURL,
			ServiceName:      opts.webhookService,
			ServiceNamespace: leaderElectionNamespace(opts.webhookServiceNS),
			ServicePort:      443,
		}
	}
	if err := flotillawebhook.Setup(mgr, kube, webhookOpts); err != nil {
		return fmt.Errorf("setting up the webhook: %w", err)
	}
	return nil
}

// setupPlacement connects the targets, runs a virtual node per target and the
// placement controller. All of it runs on the leader only.
func setupPlacement(mgr manager.Manager, cfg *rest.Config, kube kubernetes.Interface, opts options) error {
	if len(opts.targets) == 0 {
		ctrl.Log.WithName("agent").Info("No --target given: this agent places no pods")
		return nil
	}
	targets, err := buildTargets(opts.targets, cfg, opts.clusterName)
	if err != nil {
		return err
	}
	// Placement and the virtual nodes share the cache of source pods.
	informer, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("getting the source pod informer: %w", err)
	}
	sourcePods, ok := informer.(toolscache.SharedIndexInformer)
	if !ok {
		return fmt.Errorf("the source pod informer is a %T, not a SharedIndexInformer", informer)
	}
	for _, t := range targets.All() {
		if err := mgr.Add(leaderRunnable(func(ctx context.Context) error {
			t.Start(ctx)
			<-ctx.Done()
			t.Shutdown()
			return nil
		})); err != nil {
			return err
		}
		if err := mgr.Add(leaderRunnable(func(ctx context.Context) error {
			return vnode.Run(ctx, vnode.Config{
				NodeName:  protocol.VirtualNodeName("", t.Name),
				Target:    t.Name,
				Client:    kube,
				Delegates: target.Delegates{Target: t, SourceCluster: opts.clusterName},
				Pods:      sourcePods,
				Workers:   opts.vnodeWorkers,
			})
		})); err != nil {
			return err
		}
	}
	return (&reservation.Controller{
		Client:        mgr.GetClient(),
		Kube:          kube,
		SourceCluster: opts.clusterName,
		Targets:       targets,
		Recorder:      mgr.GetEventRecorder("flotilla-agent"),
		Workers:       opts.workers,
		MaxCandidates: opts.maxCands,
	}).SetupWithManager(mgr)
}

// leaderRunnable runs f only while this replica is the leader.
type leaderRunnable func(ctx context.Context) error

func (f leaderRunnable) Start(ctx context.Context) error { return f(ctx) }
func (f leaderRunnable) NeedLeaderElection() bool        { return true }

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
