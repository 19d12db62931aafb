package vnode

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Labels every virtual node carries.
const (
	// TargetLabel names the target a virtual node stands for.
	TargetLabel = protocol.Prefix + "target"
	// TypeLabel and TypeValue mark a virtual-kubelet node, as every
	// virtual-kubelet provider does.
	TypeLabel = "type"
	TypeValue = "virtual-kubelet"
	// RoleLabel and RoleValue are virtual-kubelet's customary role.
	RoleLabel = "kubernetes.io/role"
	RoleValue = "agent"
)

// kubeletVersion is what the virtual node reports as its kubelet version:
// the Kubernetes release Flotilla is built against, marked as not a kubelet.
const kubeletVersion = "v1.37.2-vk-flotilla"

// DefaultCapacity is the capacity and allocatable of a virtual node until
// targets publish summaries: large enough never to be what limits a source
// pod, which is bound by the agent and not by a scheduler.
func DefaultCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("100k"),
		corev1.ResourceMemory:           resource.MustParse("1Pi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Pi"),
		corev1.ResourcePods:             resource.MustParse("100k"),
	}
}

// Taint is the taint of every virtual node: only source pods, which
// tolerate it, go there.
func Taint() corev1.Taint {
	return corev1.Taint{
		Key:    protocol.VirtualNodeTaintKey,
		Value:  protocol.VirtualNodeTaintValue,
		Effect: corev1.TaintEffectNoSchedule,
	}
}

// FreeAnnotation on a virtual node shows what its target has free for this
// source, as its summary last said (e.g. "cpu=3,memory=6Gi,pods=200").
const FreeAnnotation = protocol.Prefix + "free"

// Reasons of a virtual node's Ready condition.
const (
	ReasonTargetReady = "TargetReady"
	// ReasonTargetNotReady is the reason when the target's State names
	// none.
	ReasonTargetNotReady = "TargetNotReady"
)

// newNode is the Node the virtual node registers and then writes as its
// state changes. Labels: the fixed ones win over cfg.Labels, which win over
// the state's, so neither a target's labels nor its nodes' can disguise the
// node.
func newNode(cfg Config, state State, now time.Time) *corev1.Node {
	labels := make(map[string]string, len(state.Labels)+len(cfg.Labels)+4)
	maps.Copy(labels, state.Labels)
	maps.Copy(labels, cfg.Labels)
	labels[TypeLabel] = TypeValue
	labels[RoleLabel] = RoleValue
	labels[TargetLabel] = cfg.Target
	labels[corev1.LabelHostname] = cfg.NodeName
	if cfg.Namespace != "" {
		labels[protocol.TargetNamespaceLabel] = cfg.Namespace
	} else {
		delete(labels, protocol.TargetNamespaceLabel)
	}

	capacity := cfg.Capacity
	if state.Capacity != nil {
		capacity = state.Capacity
	}
	annotations := map[string]string{protocol.VirtualNodeOwnerAnnotation: cfg.owner().String()}
	if state.Free != nil {
		annotations[FreeAnnotation] = formatResources(state.Free)
	}

	at := metav1.NewTime(now)
	condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: message, LastHeartbeatTime: at, LastTransitionTime: at}
	}
	ready := condition(corev1.NodeReady, corev1.ConditionTrue, ReasonTargetReady,
		fmt.Sprintf("Target %s answers the Flotilla agent", cfg.Target))
	if !state.Ready {
		reason := state.Reason
		if reason == "" {
			reason = ReasonTargetNotReady
		}
		ready = condition(corev1.NodeReady, corev1.ConditionFalse, reason,
			fmt.Sprintf("Target %s does not answer the Flotilla agent: %s", cfg.Target, state.Message))
	}
	if !state.Since.IsZero() {
		ready.LastTransitionTime = metav1.NewTime(state.Since)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: cfg.NodeName, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{Taint()}, Unschedulable: cfg.Retiring},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodeRunning,
			Capacity:    capacity.DeepCopy(),
			Allocatable: capacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{
				ready,
				condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "VirtualNode", "a virtual node has no memory pressure"),
				condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "VirtualNode", "a virtual node has no disk pressure"),
				condition(corev1.NodePIDPressure, corev1.ConditionFalse, "VirtualNode", "a virtual node has no PID pressure"),
				condition(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "VirtualNode", "a virtual node's network is its target's"),
			},
			Addresses:       nodeAddresses(cfg),
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: cfg.KubeletPort}},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux",
				Architecture:    "amd64",
				KubeletVersion:  kubeletVersion,
			},
		},
	}
}

// formatResources renders a resource list as "name=quantity,...", sorted.
func formatResources(rl corev1.ResourceList) string {
	parts := make([]string, 0, len(rl))
	for _, name := range slices.Sorted(maps.Keys(rl)) {
		q := rl[name]
		parts = append(parts, string(name)+"="+q.String())
	}
	return strings.Join(parts, ",")
}

// nodeAddresses are the node's: the InternalIP of the agent that serves its
// kubelet API when there is one, its name as hostname otherwise. Not both:
// an API server that prefers Hostname (the upstream default order) would
// dial the node's name, which no DNS resolves.
func nodeAddresses(cfg Config) []corev1.NodeAddress {
	if cfg.Address != "" {
		return []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: cfg.Address}}
	}
	return []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: cfg.NodeName}}
}

// mergeTaints returns existing with every taint of want in it (a taint of
// want replaces one with the same key and effect) and whether that changed
// anything. Other taints, an operator's for instance, stay.
func mergeTaints(existing, want []corev1.Taint) ([]corev1.Taint, bool) {
	out := append([]corev1.Taint(nil), existing...)
	changed := false
	for _, w := range want {
		found := false
		for i := range out {
			if out[i].Key != w.Key || out[i].Effect != w.Effect {
				continue
			}
			found = true
			if out[i].Value != w.Value {
				out[i].Value = w.Value
				changed = true
			}
		}
		if !found {
			out = append(out, w)
			changed = true
		}
	}
	return out, changed
}

// adoptNode registers the node, or prepares an existing one for the node
// controller, which when one exists writes only its status and metadata:
// it puts the virtual node's taint back in the spec (and, on a retiring
// node, makes it unschedulable). Registering it here, with its owner, makes
// the first target to create it its owner: one that finds it registered by
// another target, or a node that is no virtual node (a real node), gets a
// *TakenError, and no node controller runs for it.
func adoptNode(ctx context.Context, nodes typedcorev1.NodeInterface, want *corev1.Node) error {
	me, _ := OwnerOf(want)
	return retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		existing, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if _, err := nodes.Create(ctx, want, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("registering node %s: %w", want.Name, err)
			}
			klog.FromContext(ctx).Info("Registered the virtual node", "owner", me.String())
			return nil
		}
		if err != nil {
			return fmt.Errorf("getting node %s: %w", want.Name, err)
		}
		if err := CheckOwner(existing, me); err != nil {
			return err
		}
		taints, changed := mergeTaints(existing.Spec.Taints, want.Spec.Taints)
		if want.Spec.Unschedulable && !existing.Spec.Unschedulable {
			existing.Spec.Unschedulable, changed = true, true
		}
		if existing.Annotations[protocol.VirtualNodeOwnerAnnotation] != me.String() {
			// A node from before owners were recorded: its labels named
			// this target.
			if existing.Annotations == nil {
				existing.Annotations = map[string]string{}
			}
			existing.Annotations[protocol.VirtualNodeOwnerAnnotation] = me.String()
			changed = true
		}
		if !changed {
			return nil
		}
		existing.Spec.Taints = taints
		if _, err := nodes.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("restoring the taint and owner of node %s: %w", want.Name, err)
		}
		taint := Taint()
		klog.FromContext(ctx).Info("Restored the virtual node's taint and owner", "taint", taint.ToString(), "owner", me.String())
		return nil
	})
}

// ClaimNode registers the virtual node cfg describes, not Ready, unless it
// exists; it fails with a *TakenError when the node belongs to another
// target or is no virtual node. Run claims it too; a caller that claims
// first learns before running anything for the target that it may not.
func ClaimNode(ctx context.Context, cfg Config) error {
	if cfg.NodeName == "" || cfg.Target == "" || cfg.Client == nil {
		return fmt.Errorf("claiming virtual node %q of target %q: want a node name, a target and a client", cfg.NodeName, cfg.Target)
	}
	if cfg.Capacity == nil {
		cfg.Capacity = DefaultCapacity()
	}
	want := newNode(cfg, State{Message: "the agent has not started the node yet"}, time.Now())
	return adoptNode(ctx, cfg.Client.CoreV1().Nodes(), want)
}
