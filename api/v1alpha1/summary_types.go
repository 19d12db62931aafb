package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterSummary is what a target publishes to one invited source:
// aggregates only, never single nodes or pods, and the namespaces the
// invitation covers. The target's agent writes one per invitation, at most
// once every few seconds; the source reads only its own.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="Free CPU",type=string,JSONPath=`.status.free.cpu`
// +kubebuilder:printcolumn:name="Free Memory",type=string,JSONPath=`.status.free.memory`
// +kubebuilder:printcolumn:name="Updated",type=date,JSONPath=`.status.updateTime`
type ClusterSummary struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status ClusterSummaryStatus `json:"status,omitempty"`
}

// ClusterSummaryStatus is the published summary.
type ClusterSummaryStatus struct {
	// Invitation is the Source ("<namespace>/<name>") or ClusterSource
	// ("<name>") this summary is for.
	// +optional
	Invitation string `json:"invitation,omitempty"`
	// Namespaces the invitation covers: the source sends candidates only
	// there.
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// CreateNamespaces tells the source that a covered namespace that does
	// not exist yet will be created by the target's agent.
	// +optional
	CreateNamespaces bool `json:"createNamespaces,omitempty"`
	// KeepSourceLabels tells the source that the invitation lets its
	// candidates carry their source pods' labels (the invitation's
	// spec.keepSourceLabels); otherwise they travel in an annotation.
	// +optional
	KeepSourceLabels bool `json:"keepSourceLabels,omitempty"`

	// Quota is what the invitation lets the source's pods hold at once
	// (cpu, memory, pods), when it sets a quota: the source shows no more
	// than this as its virtual node's capacity.
	// +optional
	Quota corev1.ResourceList `json:"quota,omitempty"`

	// Nodes is the number of schedulable, Ready nodes.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// Allocatable is the sum of the nodes' allocatable cpu, memory and pods.
	// +optional
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`
	// Free is Allocatable less what the nodes' pods request.
	// +optional
	Free corev1.ResourceList `json:"free,omitempty"`
	// LargestFree is the most free cpu, memory and pods of any one node,
	// each taken on its own (they may come from different nodes).
	// +optional
	LargestFree corev1.ResourceList `json:"largestFree,omitempty"`
	// CommonLabels are the labels every node carries with the same value.
	// +optional
	CommonLabels map[string]string `json:"commonLabels,omitempty"`
	// Topology is, per topology key (region, zone, capacity type), the
	// values present and their free totals.
	// +optional
	// +listType=map
	// +listMapKey=key
	Topology []TopologySummary `json:"topology,omitempty"`
	// Domains are the combinations of the topology keys' values the
	// cluster's nodes carry, one entry each: a spread over several keys
	// counts these and no pair the nodes do not have (a zone with no spot
	// node has no spot domain). Nodes that take no pods (cordoned, NotReady,
	// tainted) give their combination too, with no node counted: a spread
	// counts their domain, as kube-scheduler does. Absent when the target's
	// agent does not publish it (an older one) or its nodes carry more than
	// 256 combinations: the source then takes every combination of
	// Topology's values.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Domains []TopologyDomain `json:"domains,omitempty"`
	// UpdateTime is when the summary was computed.
	// +optional
	UpdateTime *metav1.Time `json:"updateTime,omitempty"`
}

// TopologySummary is one topology key's values.
type TopologySummary struct {
	// Key is the node label, e.g. topology.kubernetes.io/zone.
	Key string `json:"key"`
	// Values present on nodes, with their totals.
	// +optional
	// +listType=map
	// +listMapKey=value
	Values []TopologyValue `json:"values,omitempty"`
}

// TopologyValue is the nodes with one value of a topology key.
type TopologyValue struct {
	Value string `json:"value"`
	// Nodes with this value.
	Nodes int32 `json:"nodes"`
	// Free cpu, memory and pods on them.
	// +optional
	Free corev1.ResourceList `json:"free,omitempty"`
}

// TopologyDomain is one combination of topology values some node carries.
type TopologyDomain struct {
	// Values are the node labels of the topology keys, key to value; a key
	// the nodes of this combination lack is absent.
	// +kubebuilder:validation:MaxProperties=16
	Values map[string]string `json:"values"`
	// Nodes with this combination that take pods (counted as status.nodes
	// counts them); 0 when only nodes that take no pods carry it.
	// +kubebuilder:validation:Minimum=0
	Nodes int32 `json:"nodes"`
	// Free cpu, memory and pods on the nodes counted.
	// +optional
	Free corev1.ResourceList `json:"free,omitempty"`
}

// ClusterSummaryList is a list of ClusterSummaries.
//
// +kubebuilder:object:root=true
type ClusterSummaryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterSummary `json:"items"`
}

func init() {
	register(&ClusterSummary{}, &ClusterSummaryList{})
}
