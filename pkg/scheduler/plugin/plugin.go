// Package plugin is the scheduling-framework glue of the FlotillaCandidate
// plugin, which runs in the target cluster's scheduler (cmd/scheduler, built
// by pkg/scheduler): its name, its factory and one short method per
// extension point. The protocol itself lives in package core.
//
// For a candidate pod (label multicluster.flotilla.dev/candidate=true) the
// plugin makes a reservation with a fresh nonce at Reserve, holds the pod in
// Permit until the source allows or denies that nonce, and reports Reserved,
// Unreserved and Bound in the pod's state annotation (Bound in the binding
// itself, see Bind); Reserved and Bound carry the reserved node's values of
// the topology keys (args topologyKeys). At PreFilter it refuses a candidate that would exceed
// the quota of an invitation (Source, ClusterSource) of its source cluster
// covering its namespace, or a member of a gang's share while an older
// share of another source waits for room (core.Manager.HoldBack); at
// PostFilter, a member that found no node makes its share wait for room
// and lets younger shares go (core.Manager.NoRoom). Every other pod passes
// through untouched.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/scheduler/plugin/core"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "FlotillaCandidate"

// Plugin is the Flotilla candidate plugin of one scheduling profile.
type Plugin struct {
	handle  fwk.Handle
	manager *core.Manager
	quotas  *quotas
}

var (
	_ core.Binder           = binder{}
	_ fwk.PreFilterPlugin   = &Plugin{}
	_ fwk.PostFilterPlugin  = &Plugin{}
	_ fwk.ReservePlugin     = &Plugin{}
	_ fwk.PermitPlugin      = &Plugin{}
	_ fwk.BindPlugin        = &Plugin{}
	_ fwk.PostBindPlugin    = &Plugin{}
	_ fwk.EnqueueExtensions = &Plugin{}
)

// New builds the plugin for one profile; its workers stop with ctx.
func New(ctx context.Context, obj runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
	args, err := core.DecodeArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("decoding %s args: %w", Name, err)
	}
	timeout, err := args.PermitTimeout()
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	topologyKeys, err := args.Topology()
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	shareTimeout, err := args.ShareTimeout()
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	pods := handle.SharedInformerFactory().Core().V1().Pods()
	activator := func(pods []*v1.Pod) { activate(handle, pods) }
	writer := core.NewStateWriter("flotilla_candidate_state_"+handle.ProfileName(), core.ClientStatePatcher{Client: handle.ClientSet(), Pods: pods.Lister()}, nil)
	manager := core.NewManager(core.Options{
		PluginName:    Name,
		SchedulerName: handle.ProfileName(),
		PermitTimeout: timeout,
		ShareTimeout:  shareTimeout,
		TopologyKeys:  topologyKeys,
		Activate:      activator,
	}, handle, pods.Lister(), writer)
	if _, err := pods.Informer().AddEventHandler(manager.EventHandler()); err != nil {
		return nil, fmt.Errorf("watching candidate pods: %w", err)
	}
	quotas, err := newQuotas(handle)
	if err != nil {
		return nil, fmt.Errorf("%s quotas: %w", Name, err)
	}
	go manager.Run(ctx)
	go quotas.run(ctx)
	p := &Plugin{handle: handle, manager: manager, quotas: quotas}
	State.Register(handle.ProfileName(), p.debugState)
	klog.FromContext(ctx).Info("Flotilla candidate plugin ready", "profile", handle.ProfileName(), "permitTimeout", timeout, "shareTimeout", shareTimeout, "topologyKeys", topologyKeys)
	return p, nil
}

// Name returns the plugin's name.
func (p *Plugin) Name() string { return Name }

// PreFilter reports a reservation of an earlier scheduler that the
// candidate's state still shows as lost, and refuses a candidate its source
// denies or that would exceed its invitation's quota.
// No node can change that, so preemption is not tried; the candidate is
// activated again when its source's usage drops or its quota changes.
// It also refuses a gang's member while an older share of another source
// waits for room; the member is activated once none waits.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !core.IsCandidate(pod.Labels) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	p.manager.Rescheduling(ctx, pod)
	if reason, denied := core.Denied(pod.Labels, pod.Annotations); denied {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	if reason := p.quotas.admit(pod); reason != "" {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	if reason := p.manager.HoldBack(klog.FromContext(ctx), pod); reason != "" {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	state.Write(admittedKey, admitted{})
	return nil, nil
}

// PreFilterExtensions: the quota does not depend on the pods of a node.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// admittedKey marks, in a scheduling cycle's state, a candidate this
// plugin's PreFilter let through: only such a one failed for want of a
// node, the rest were refused by this plugin.
const admittedKey fwk.StateKey = Name + "/admitted"

type admitted struct{}

func (admitted) Clone() fwk.StateData { return admitted{} }

// PostFilter is told that a candidate found no node. A member of a gang's
// share that some node could take once pods leave it (a node Unschedulable,
// not UnschedulableAndUnresolvable) makes its share wait for room, and the
// reservations of younger shares of other sources are let go. Nothing is
// preempted and no node is nominated: the candidate stays Unschedulable and
// is tried again when the reservations let go are forgotten.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	unschedulable := fwk.NewStatus(fwk.Unschedulable)
	if !core.IsCandidate(pod.Labels) {
		return nil, unschedulable
	}
	if _, err := state.Read(admittedKey); err != nil {
		return nil, unschedulable
	}
	nodes, err := statuses.NodesForStatusCode(p.handle.SnapshotSharedLister().NodeInfos(), fwk.Unschedulable)
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("listing the nodes %s failed on: %w", klog.KObj(pod), err))
	}
	if len(nodes) == 0 {
		return nil, unschedulable
	}
	p.manager.NoRoom(klog.FromContext(ctx), pod)
	return nil, unschedulable
}

// Reserve makes a new reservation of a candidate on nodeName.
func (p *Plugin) Reserve(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if !core.IsCandidate(pod.Labels) {
		return nil
	}
	var score int64
	var nodeLabels map[string]string
	if node, err := p.handle.SnapshotSharedLister().NodeInfos().Get(nodeName); err == nil {
		score = core.ScoreOf(node, pod)
		if n := node.Node(); n != nil {
			nodeLabels = n.Labels
		}
	}
	nonce, err := p.manager.Reserve(ctx, pod, nodeName, nodeLabels, score)
	if err != nil {
		return fwk.AsStatus(err)
	}
	p.quotas.ledger.Reserve(pod, nonce)
	candidatesReserved.WithLabelValues(pod.Labels[protocol.SourceClusterLabel]).Inc()
	return nil
}

// Unreserve ends a candidate's reservation.
func (p *Plugin) Unreserve(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, nodeName string) {
	if core.IsCandidate(pod.Labels) {
		if kind, held := p.manager.Unreserve(ctx, pod, nodeName); kind != "" {
			cluster := pod.Labels[protocol.SourceClusterLabel]
			candidatesUnreserved.WithLabelValues(cluster, kind).Inc()
			unreservedHeldSeconds.WithLabelValues(cluster, kind).Add(held.Seconds())
		}
		p.quotas.activate(p.quotas.ledger.Unreserve(pod))
	}
}

// Permit holds a candidate until the source allows or denies its
// reservation, a gang's share member until its share is let go.
func (p *Plugin) Permit(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) (*fwk.Status, time.Duration) {
	if !core.IsCandidate(pod.Labels) {
		return nil, 0
	}
	switch d := p.manager.Permit(ctx, pod); d.Verdict {
	case core.Allow:
		return nil, 0
	case core.Reject:
		return fwk.NewStatus(fwk.Unschedulable, d.Reason), 0
	default:
		return fwk.NewStatus(fwk.Wait, "waiting for the source to allow or deny the reservation"), d.Timeout
	}
}

// Bind binds a candidate with a Binding that also carries its Bound state,
// one write where a bind and a report would be two, and that lands only on
// the version of the candidate it judged still Reserved by this reservation
// and allowed (core.Manager.Bind): a scheduler deposed while it held the
// candidate cannot bind it after its successor reported it lost. Other pods
// are left to the next bind plugin (DefaultBinder). The profile must list
// this plugin under bind.enabled to run it before DefaultBinder; without
// that, PostBind reports Bound with a write of its own, and the binding has
// no such precondition.
func (p *Plugin) Bind(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if !core.IsCandidate(pod.Labels) {
		return fwk.NewStatus(fwk.Skip)
	}
	err := p.manager.Bind(ctx, pod, nodeName, binder{handle: p.handle})
	if refused := new(core.BindRefusedError); errors.As(err, &refused) {
		return fwk.NewStatus(fwk.Unschedulable, refused.Error())
	}
	if err != nil {
		return fwk.AsStatus(err)
	}
	return nil
}

// binder binds through the scheduler's API cacher when it has one, so the
// binding is ordered with the scheduler's other calls about the pod.
type binder struct {
	handle fwk.Handle
}

func (b binder) Get(ctx context.Context, namespace, name string) (*v1.Pod, error) {
	return b.handle.ClientSet().CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (b binder) Bind(ctx context.Context, binding *v1.Binding) error {
	cacher := b.handle.APICacher()
	if cacher == nil {
		return b.handle.ClientSet().CoreV1().Pods(binding.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	}
	onFinish, err := cacher.BindPod(binding)
	if err != nil {
		return err
	}
	return cacher.WaitOnFinish(ctx, onFinish)
}

// PostBind reports a candidate as bound, unless Bind already did.
func (p *Plugin) PostBind(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, nodeName string) {
	if core.IsCandidate(pod.Labels) {
		p.quotas.ledger.Bound(pod)
		p.manager.Bound(ctx, pod, nodeName)
		candidatesBound.WithLabelValues(pod.Labels[protocol.SourceClusterLabel]).Inc()
	}
}

// EventsToRegister requeues a candidate whose reservation this plugin ended
// once its Unreserved report has landed, or whose denial the source lifted,
// and on no other event.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{{
		Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update},
		QueueingHintFn: func(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
			if core.ReservationEnded(pod, oldObj, newObj) || core.DenialLifted(pod, oldObj, newObj) {
				return fwk.Queue, nil
			}
			return fwk.QueueSkip, nil
		},
	}}, nil
}
