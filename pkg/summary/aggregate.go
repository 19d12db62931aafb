package summary

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// DefaultTopologyKeys are the keys a summary reports free totals for: region,
// zone and capacity type, the keys a target's scheduler reports a
// reservation's node's values of (spelled once, in pkg/protocol).
var DefaultTopologyKeys = protocol.DefaultTopologyKeys

// Virtual-kubelet nodes (Flotilla's own and any other provider's) stand for
// capacity in other clusters: counting them would publish a peer's capacity
// as this cluster's. Every provider labels them so.
const (
	virtualNodeLabel = "type"
	virtualNodeValue = "virtual-kubelet"
)

// requestOptions compute a pod's requests as kube-scheduler 1.35 does:
// in-place resize (GA, its gate locked on) counts the larger of what is asked
// and what is allocated, and pod-level requests (beta, on) win over the
// containers'. Overhead is included.
var requestOptions = resourcehelper.PodResourcesOptions{UseStatusResources: true}

// Amounts are cpu (millicores), memory (bytes) and pods, as a node offers
// them (AllocatableOf) or a pod takes them (RequestsOf).
type Amounts struct {
	cpu, memory, pods int64
}

// Plus is a+b, saturating.
func (a Amounts) Plus(b Amounts) Amounts {
	return Amounts{cpu: addSat(a.cpu, b.cpu), memory: addSat(a.memory, b.memory), pods: addSat(a.pods, b.pods)}
}

// Less is a-b, never below zero.
func (a Amounts) Less(b Amounts) Amounts {
	return Amounts{cpu: subFloor(a.cpu, b.cpu), memory: subFloor(a.memory, b.memory), pods: subFloor(a.pods, b.pods)}
}

// String is the amounts as a log line shows them.
func (a Amounts) String() string {
	return fmt.Sprintf("cpu=%dm memory=%d pods=%d", a.cpu, a.memory, a.pods)
}

// Covers reports whether a holds b in every resource.
func (a Amounts) Covers(b Amounts) bool {
	return a.cpu >= b.cpu && a.memory >= b.memory && a.pods >= b.pods
}

// Max is the larger of a and b in each resource.
func (a Amounts) Max(b Amounts) Amounts {
	return Amounts{cpu: max(a.cpu, b.cpu), memory: max(a.memory, b.memory), pods: max(a.pods, b.pods)}
}

// List is the amounts as a ResourceList of cpu, memory and pods.
func (a Amounts) List() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(a.cpu, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(a.memory, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(a.pods, resource.DecimalSI),
	}
}

// addSat adds non-negative values, stopping at MaxInt64 instead of
// overflowing.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func subFloor(a, b int64) int64 {
	if b >= a {
		return 0
	}
	return a - b
}

func nonNegative(v int64) int64 { return max(v, 0) }

type countedNode struct {
	labels      map[string]string
	allocatable Amounts
	requested   Amounts
}

// Aggregate computes the capacity part of a summary (every field but
// Invitation, Namespaces, CreateNamespaces and UpdateTime) from the nodes and
// pods of the cluster. Nodes may be whole or trimmed by the publisher's
// cache.
//
// A node counts when it is Ready, not cordoned (spec.unschedulable), has no
// NoSchedule or NoExecute taint (whatever a pod might tolerate: the summary
// describes capacity any candidate can use) and is not a virtual-kubelet node
// (label type=virtual-kubelet). Only counted nodes and the pods bound to them
// enter the totals; pods that succeeded or failed hold nothing.
//
//   - Allocatable sums the nodes' allocatable cpu, memory and pods.
//   - Free is, summed over nodes, allocatable less the requests of the
//     node's pods (each pod takes one of the node's pods), never below zero
//     on any node. A pod's requests are kube-scheduler's: the larger of its
//     containers' sum and any init container (sidecars counted as the
//     scheduler counts them), plus overhead; pod-level requests win over the
//     containers', and a resize counts as the larger of what is asked and
//     what the kubelet still holds.
//   - LargestFree is the most free cpu, memory and pods of any one node,
//     each taken on its own.
//   - CommonLabels are the labels every counted node carries with the same
//     value, except labels that name one node (see identityLabel); at most
//     MaxCommonLabels of them, the first by key.
//   - Topology has, for each of topologyKeys carried by a counted node (in
//     the order given, duplicates and empty keys dropped, at most
//     MaxTopologyKeys), the values with their node count and free totals,
//     sorted by value. A key with more than MaxTopologyValues values names
//     nodes rather than failure domains and is left out.
//   - Domains has each combination of the topology keys' values (a key
//     with more than MaxTopologyValues values left out) that a node
//     carries, counted or not (a cordoned node's zone is a domain a spread
//     counts, as kube-scheduler's does), virtual nodes aside, with the
//     counted nodes and their free totals, sorted by the keys' values in
//     the keys' order. More than MaxDomains combinations give none.
//
// With no counted node, the summary is zero and its lists empty but
// Domains.
func Aggregate(nodes []*corev1.Node, pods []*corev1.Pod, topologyKeys []string) v1alpha1.ClusterSummaryStatus {
	usages := make([]*PodUsage, 0, len(pods))
	for _, pod := range pods {
		if pod != nil && pod.Spec.NodeName != "" && !ended(pod) {
			usages = append(usages, usageOf(pod))
		}
	}
	return aggregate(nodes, usages, topologyKeys)
}

// aggregate is Aggregate over the pods as the publisher's cache keeps them.
func aggregate(nodes []*corev1.Node, pods []*PodUsage, topologyKeys []string) v1alpha1.ClusterSummaryStatus {
	counted := make(map[string]*countedNode, len(nodes))
	for _, node := range nodes {
		if node == nil || !schedulable(node) {
			continue
		}
		if _, dup := counted[node.Name]; dup {
			continue
		}
		counted[node.Name] = &countedNode{labels: node.Labels, allocatable: AllocatableOf(node)}
	}
	for _, pod := range pods {
		if pod == nil || pod.ended {
			continue
		}
		if n := counted[pod.nodeName]; n != nil {
			n.requested = n.requested.Plus(pod.requested)
		}
	}
	var status v1alpha1.ClusterSummaryStatus
	status.Domains = domains(nodes, counted, topologyKeys)
	if len(counted) == 0 {
		return status
	}

	names := make([]string, 0, len(counted))
	for name := range counted {
		names = append(names, name)
	}
	sort.Strings(names)
	var allocatable, free, largest Amounts
	for _, name := range names {
		n := counted[name]
		allocatable = allocatable.Plus(n.allocatable)
		f := n.free()
		free = free.Plus(f)
		largest = largest.Max(f)
	}
	status.Nodes = int32(min(len(counted), math.MaxInt32))
	status.Allocatable = allocatable.List()
	status.Free = free.List()
	status.LargestFree = largest.List()
	status.CommonLabels = commonLabels(counted, names)
	status.Topology = topology(counted, names, topologyKeys)
	return status
}

func (n *countedNode) free() Amounts { return n.allocatable.Less(n.requested) }

func schedulable(node *corev1.Node) bool {
	if node.Spec.Unschedulable || IsVirtual(node) {
		return false
	}
	for _, t := range node.Spec.Taints {
		if KeepsPodsOff(&t) {
			return false
		}
	}
	return IsReady(node)
}

// KeepsPodsOff reports whether a taint keeps the pods that do not tolerate
// it off its node: NoSchedule and NoExecute do, PreferNoSchedule does not.
func KeepsPodsOff(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// IsReady reports whether node's Ready condition is True.
func IsReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// IsVirtual reports whether node is a virtual-kubelet node (label
// type=virtual-kubelet), which stands for capacity elsewhere.
func IsVirtual(node *corev1.Node) bool {
	return node.Labels[virtualNodeLabel] == virtualNodeValue
}

func ended(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// AllocatableOf is what a node offers its pods: its allocatable cpu,
// memory and pods.
func AllocatableOf(node *corev1.Node) Amounts {
	a := node.Status.Allocatable
	return Amounts{
		cpu:    nonNegative(a.Cpu().MilliValue()),
		memory: nonNegative(a.Memory().Value()),
		pods:   nonNegative(a.Pods().Value()),
	}
}

// RequestsOf is what a pod takes of its node; a pod always takes one pod.
func RequestsOf(pod *corev1.Pod) Amounts {
	r := resourcehelper.PodRequests(pod, requestOptions)
	return Amounts{
		cpu:    nonNegative(r.Cpu().MilliValue()),
		memory: nonNegative(r.Memory().Value()),
		pods:   1,
	}
}

// identityLabel reports whether a label names one node rather than a group
// of them: kubernetes.io/hostname, and any label whose name (the part after
// the prefix) is hostname or instance-id, as cloud providers spell a node's
// machine. In a cluster of one node every label is common; these would tell
// a peer which machine it is.
func identityLabel(key string) bool {
	if key == corev1.LabelHostname {
		return true
	}
	name := key[strings.LastIndex(key, "/")+1:]
	return name == "hostname" || name == "instance-id"
}

func commonLabels(counted map[string]*countedNode, names []string) map[string]string {
	common := make(map[string]string)
	for k, v := range counted[names[0]].labels {
		if !identityLabel(k) {
			common[k] = v
		}
	}
	for _, name := range names[1:] {
		labels := counted[name].labels
		for k, v := range common {
			if got, ok := labels[k]; !ok || got != v {
				delete(common, k)
			}
		}
	}
	if len(common) == 0 {
		return nil
	}
	if len(common) > MaxCommonLabels {
		keys := make([]string, 0, len(common))
		for k := range common {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys[MaxCommonLabels:] {
			delete(common, k)
		}
	}
	return common
}

func topology(counted map[string]*countedNode, names []string, keys []string) []v1alpha1.TopologySummary {
	var out []v1alpha1.TopologySummary
	seen := make(map[string]bool, len(keys))
	for _, key := range keys {
		if key == "" || seen[key] {
			continue
		}
		seen[key] = true
		if len(seen) > MaxTopologyKeys {
			break
		}
		type domain struct {
			nodes int32
			free  Amounts
		}
		domains := make(map[string]*domain)
		for _, name := range names {
			n := counted[name]
			value, ok := n.labels[key]
			if !ok {
				continue
			}
			d := domains[value]
			if d == nil {
				d = &domain{}
				domains[value] = d
			}
			d.nodes++
			d.free = d.free.Plus(n.free())
		}
		if len(domains) == 0 || len(domains) > MaxTopologyValues {
			continue
		}
		values := make([]v1alpha1.TopologyValue, 0, len(domains))
		for value, d := range domains {
			values = append(values, v1alpha1.TopologyValue{Value: value, Nodes: d.nodes, Free: d.free.List()})
		}
		sort.Slice(values, func(i, j int) bool { return values[i].Value < values[j].Value })
		out = append(out, v1alpha1.TopologySummary{Key: key, Values: values})
	}
	return out
}

// domains lists the combinations of the topology keys' values the
// cluster's nodes carry (see Aggregate).
func domains(nodes []*corev1.Node, counted map[string]*countedNode, topologyKeys []string) []v1alpha1.TopologyDomain {
	keys := domainKeys(nodes, topologyKeys)
	if len(keys) == 0 {
		return nil
	}
	type combination struct {
		values map[string]string
		nodes  int32
		free   Amounts
	}
	byID := map[string]*combination{}
	seen := make(map[string]bool, len(nodes))
	for _, node := range nodes {
		if node == nil || IsVirtual(node) || seen[node.Name] {
			continue
		}
		seen[node.Name] = true
		// The values in the keys' order, each ended by a byte no label
		// value holds: an id that sorts like the combinations.
		var id strings.Builder
		values := make(map[string]string, len(keys))
		for _, k := range keys {
			if v, ok := node.Labels[k]; ok {
				values[k] = v
				id.WriteString("\x01" + v)
			}
			id.WriteByte(0)
		}
		c := byID[id.String()]
		if c == nil {
			if len(byID) == MaxDomains {
				return nil
			}
			c = &combination{values: values}
			byID[id.String()] = c
		}
		if n := counted[node.Name]; n != nil {
			c.nodes++
			c.free = c.free.Plus(n.free())
		}
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]v1alpha1.TopologyDomain, 0, len(ids))
	for _, id := range ids {
		c := byID[id]
		d := v1alpha1.TopologyDomain{Values: c.values, Nodes: c.nodes}
		if c.nodes > 0 {
			d.Free = c.free.List()
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// domainKeys are the topology keys whose combinations Domains lists: in
// the order given, duplicates and empty keys dropped, at most
// MaxTopologyKeys, and no key with more than MaxTopologyValues values on
// the nodes (it names nodes, not failure domains).
func domainKeys(nodes []*corev1.Node, topologyKeys []string) []string {
	var keys []string
	for _, k := range topologyKeys {
		if k == "" || slices.Contains(keys, k) {
			continue
		}
		if len(keys) == MaxTopologyKeys {
			break
		}
		values := map[string]bool{}
		for _, node := range nodes {
			if node == nil || IsVirtual(node) {
				continue
			}
			if v, ok := node.Labels[k]; ok {
				values[v] = true
			}
		}
		if len(values) <= MaxTopologyValues {
			keys = append(keys, k)
		}
	}
	return keys
}
