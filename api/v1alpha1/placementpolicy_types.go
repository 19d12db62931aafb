package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PlacementPolicySpec says where the pods it governs may run and how they
// spread. Every field is optional: an empty policy changes nothing.
type PlacementPolicySpec struct {
	// PodSelector selects the pods of the policy's namespace it governs; an
	// empty selector selects every pod of the namespace. A pod may instead
	// name a policy with the annotation
	// multicluster.flotilla.dev/placement-policy, which wins over every
	// selector. Of several policies whose selectors match a pod, the most
	// specific (most requirements) wins; two equally specific ones are a
	// conflict, reported on the pod, which is then placed as if no policy
	// selected it.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// ClusterSelector: only targets whose labels (the virtual node's: the
	// Target's labels and those common to all its nodes) match get the
	// pods.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`

	// ClusterAffinity narrows and orders the targets further.
	// +optional
	ClusterAffinity *ClusterAffinity `json:"clusterAffinity,omitempty"`

	// SpreadConstraints spread a workload's pods across the values of
	// topology keys. Several keys spread jointly and hierarchically, the
	// earlier first: region, then zone within region.
	// +optional
	// +listType=map
	// +listMapKey=topologyKey
	// +kubebuilder:validation:MaxItems=4
	SpreadConstraints []SpreadConstraint `json:"spreadConstraints,omitempty"`

	// Scoring weighs spread against the targets' own scores and says how
	// long an election may wait for more reservations.
	// +optional
	Scoring *Scoring `json:"scoring,omitempty"`

	// CapacityType splits each workload's pods between on-demand and spot
	// nodes.
	// +optional
	CapacityType *CapacityTypeSplit `json:"capacityType,omitempty"`
}

// ClusterAffinity is required and preferred target selection.
type ClusterAffinity struct {
	// Required: a target must match at least one of these selectors.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Required []metav1.LabelSelector `json:"required,omitempty"`
	// Preferred adds its weight to the score of the targets it matches.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Preferred []PreferredClusters `json:"preferred,omitempty"`
	// FallbackGroups are tried in order: the pods go to targets of the
	// first group, and to those of the next only when every target of the
	// earlier groups cannot run them (unschedulable, unreachable, or not
	// answering their candidates). A target in no group gets no pod when
	// groups are set.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	FallbackGroups []metav1.LabelSelector `json:"fallbackGroups,omitempty"`
}

// PreferredClusters weighs the targets a selector matches.
type PreferredClusters struct {
	// Weight added to the score of a matching target.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight"`
	// Selector over target labels.
	Selector metav1.LabelSelector `json:"selector"`
}

// Values of SpreadConstraint.WhenUnsatisfiable.
const (
	DoNotSchedule  = "DoNotSchedule"
	ScheduleAnyway = "ScheduleAnyway"
)

// SpreadConstraint spreads a workload's pods over one topology key.
type SpreadConstraint struct {
	// TopologyKey is a label key whose values are the domains, e.g.
	// topology.kubernetes.io/zone. A target's value comes from its labels,
	// else from the values its nodes carry (its ClusterSummary).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	TopologyKey string `json:"topologyKey"`
	// MaxSkew is the largest difference allowed between the number of a
	// workload's pods in a domain and in the emptiest one beside it.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	MaxSkew int32 `json:"maxSkew,omitempty"`
	// WhenUnsatisfiable: DoNotSchedule keeps a pod Pending rather than
	// exceed maxSkew; ScheduleAnyway only prefers the emptier domains.
	// +optional
	// +kubebuilder:default=ScheduleAnyway
	// +kubebuilder:validation:Enum=DoNotSchedule;ScheduleAnyway
	WhenUnsatisfiable string `json:"whenUnsatisfiable,omitempty"`
}

// Scoring is how the election weighs the reserved candidates.
type Scoring struct {
	// SpreadWeight multiplies the spread score (in [-100, 100]) before the
	// target's own score (in [0, 100]) is added.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SpreadWeight *int32 `json:"spreadWeight,omitempty"`
	// Window lets an election wait for more reservations before it elects
	// the best; without it, the first reservation the policy allows wins.
	// +optional
	Window *ScoringWindow `json:"window,omitempty"`
}

// ScoringWindow bounds how long an election waits for more reservations.
type ScoringWindow struct {
	// Candidates: elect as soon as this many are reserved.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Candidates int32 `json:"candidates"`
	// TimeoutMilliseconds: elect the best reserved so far this long after
	// the first reservation was seen.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60000
	TimeoutMilliseconds int32 `json:"timeoutMilliseconds"`
}

// CapacityTypeSplit keeps at most MaxOnDemand of a workload's pods on
// on-demand nodes and the rest on spot nodes.
// +kubebuilder:validation:XValidation:rule="!has(self.onDemandValues) || !has(self.spotValues) || !self.onDemandValues.exists(v, v in self.spotValues)",message="capacityType.onDemandValues and capacityType.spotValues must not share a value"
type CapacityTypeSplit struct {
	// MaxOnDemand is how many of a workload's pods may run on on-demand
	// nodes; the others run on spot nodes.
	// +kubebuilder:validation:Minimum=0
	MaxOnDemand int32 `json:"maxOnDemand"`
	// NodeLabel is the node label that tells the capacity type.
	// +optional
	// +kubebuilder:default="node.kubernetes.io/capacity"
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	NodeLabel string `json:"nodeLabel,omitempty"`
	// OnDemandValues are the label's values that mean on-demand.
	// +optional
	// +kubebuilder:default={"on-demand"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	OnDemandValues []LabelValue `json:"onDemandValues,omitempty"`
	// SpotValues are the label's values that mean spot.
	// +optional
	// +kubebuilder:default={"spot"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	SpotValues []LabelValue `json:"spotValues,omitempty"`
}

// PlacementPolicyStatus reports what the policy governs.
type PlacementPolicyStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Accepted (the spec could be used).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Pods is the number of pods the policy governs.
	// +optional
	Pods int32 `json:"pods,omitempty"`
	// Pending is how many of them are not placed yet.
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// Targets is where the placed ones run.
	// +optional
	// +listType=map
	// +listMapKey=name
	Targets []TargetPods `json:"targets,omitempty"`
}

// TargetPods counts a policy's pods in one target.
type TargetPods struct {
	// Name of the target.
	Name string `json:"name"`
	// Pods running there (bound to its virtual node).
	Pods int32 `json:"pods"`
}

// PlacementPolicyAccepted is the condition type that says whether a
// policy's spec could be used.
const PlacementPolicyAccepted = "Accepted"

// ReasonUnknownTopologyKey is the reason of an Accepted condition (still
// True: the policy governs its pods) when a spread constraint's topology
// key is carried by no target, so that level spreads nothing.
const ReasonUnknownTopologyKey = "UnknownTopologyKey"

// PlacementPolicy governs where the pods it selects run: which targets,
// how they spread across failure domains, and how many may use on-demand
// nodes.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla,shortName=pp
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.pods`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pending`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PlacementPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PlacementPolicySpec   `json:"spec,omitempty"`
	Status PlacementPolicyStatus `json:"status,omitempty"`
}

// PlacementPolicyList is a list of PlacementPolicies.
//
// +kubebuilder:object:root=true
type PlacementPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PlacementPolicy `json:"items"`
}

func init() {
	register(&PlacementPolicy{}, &PlacementPolicyList{})
}
