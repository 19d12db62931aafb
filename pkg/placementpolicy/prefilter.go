package placementpolicy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
)

// Needs is what a source pod asks of the node that runs it: what the spec
// its candidates run requests, and where it may run.
type Needs struct {
	Requests     corev1.ResourceList
	NodeSelector map[string]string
	Required     *corev1.NodeSelector
	// Tolerations are the pod's own, without those Flotilla gives a
	// source pod.
	Tolerations []corev1.Toleration
}

// NeedsOf reads the needs of a source pod from the spec its candidates run
// (sourcespec.Original): the source pod itself asks nothing of its own
// cluster. A pod without a readable saved spec needs nothing.
func NeedsOf(pod *corev1.Pod) Needs {
	spec, err := sourcespec.Original(pod)
	if err != nil {
		return Needs{}
	}
	n := Needs{
		Requests:     resourcehelper.PodRequests(&corev1.Pod{Spec: *spec}, resourcehelper.PodResourcesOptions{}),
		NodeSelector: spec.NodeSelector,
		Tolerations:  spec.Tolerations,
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil {
		n.Required = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	return n
}

// Standing is a target as the filter before any plan sees it.
type Standing struct {
	// Cluster is the target as placement sees it (ClusterOf): the filter
	// reads the values its nodes carry per topology key and the most free
	// on one node, both from its ClusterSummary; a target that publishes
	// none (a self target) says neither.
	placement.Cluster
	// HeldBack says why the target takes no new pod now, "" when it does:
	// its virtual node is cordoned, or the delegates of this cluster's
	// pods vanished there again and again.
	HeldBack string
	// Taints are its virtual node's taints that keep off the pods that do
	// not tolerate them (OperatorTaints).
	Taints []corev1.Taint
}

// OperatorTaints are the taints of a target's virtual node that keep pods
// off it (NoSchedule, NoExecute) besides the virtual node's own, which every
// source pod tolerates, and those kube-controller-manager sets from the
// node's conditions (not-ready, unreachable, unschedulable, pressure): an
// operator's, as on any node. A virtual node's conditions are the agent's
// word on its target's health, which placement weighs on its own, and its
// cordon is followed as such. Prefilter leaves a target out for a pod that
// does not tolerate one.
func OperatorTaints(node *corev1.Node) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range node.Spec.Taints {
		if t.Key == protocol.VirtualNodeTaintKey || conditionTaints[t.Key] || (t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// conditionTaints are the keys of the taints kube-controller-manager's node
// lifecycle controller keeps in step with a node's conditions and cordon.
var conditionTaints = map[string]bool{
	corev1.TaintNodeNotReady:           true,
	corev1.TaintNodeUnreachable:        true,
	corev1.TaintNodeUnschedulable:      true,
	corev1.TaintNodeMemoryPressure:     true,
	corev1.TaintNodeDiskPressure:       true,
	corev1.TaintNodePIDPressure:        true,
	corev1.TaintNodeNetworkUnavailable: true,
}

// Prefilter says which of a pod's targets get no candidate whatever the
// policy, and why, before any policy groups or counts them: nil when none.
// In order:
//   - a target held back takes no new pod, nor one whose virtual node
//     has a taint the pod does not tolerate (as kube-scheduler binds no
//     pod to a node whose NoSchedule taint it does not tolerate);
//   - a target none of whose nodes can meet the pod's required node
//     affinity, as its summary tells (placement.Unfit), cannot run it;
//   - of the others, a target none of whose nodes has room for the pod's
//     requests (placement.TooLarge) is left out while another may have
//     room; when none may, each keeps its chance (placement.WithRoom):
//     summaries are a few seconds old, and a target whose nodes grow
//     learns of a pod that needs a larger node only from its candidate.
//
// The agent fans out to the targets it keeps, and `kubectl flotilla
// explain` says why it left out the others.
func Prefilter(targets []Standing, needs Needs) map[string]string {
	var excluded map[string]string
	exclude := func(name, why string) {
		if excluded == nil {
			excluded = map[string]string{}
		}
		excluded[name] = why
	}
	fit := make([]placement.Cluster, 0, len(targets))
	for _, t := range targets {
		if t.HeldBack != "" {
			exclude(t.Name, t.HeldBack)
			continue
		}
		if taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), t.Taints, needs.Tolerations, nil, false); untolerated {
			exclude(t.Name, fmt.Sprintf("its virtual node has the taint %s, which the pod does not tolerate", taint.ToString()))
			continue
		}
		if why := placement.Unfit(t.Cluster, needs.Required); why != "" {
			exclude(t.Name, why)
			continue
		}
		fit = append(fit, t.Cluster)
	}
	_, small := placement.WithRoom(fit, needs.Requests)
	for name, why := range small {
		exclude(name, why)
	}
	return excluded
}

// ClusterOf is a target as placement sees it, from what it publishes:
// labels are its virtual node's (those common to its nodes, the Target's
// own over them); s, its ClusterSummary (nil when it publishes none), gives
// the values its nodes carry per topology key (of the nodes that take
// pods), the combinations of them its nodes carry when it lists them, and
// the most free on one node.
func ClusterOf(name string, labels map[string]string, s *v1alpha1.ClusterSummaryStatus) placement.Cluster {
	cl := placement.Cluster{Name: name, Labels: labels}
	if s == nil {
		return cl
	}
	cl.LargestFree = s.LargestFree
	cl.Topology = make(map[string][]string, len(s.Topology))
	for _, ts := range s.Topology {
		for _, v := range ts.Values {
			if v.Nodes > 0 {
				cl.Topology[ts.Key] = append(cl.Topology[ts.Key], v.Value)
			}
		}
	}
	if s.Domains != nil {
		cl.Combinations = make([]placement.Combination, len(s.Domains))
		for i, d := range s.Domains {
			cl.Combinations[i] = placement.Combination{Values: d.Values, Open: d.Nodes > 0}
		}
	}
	return cl
}
