package protocol

// The on-demand/spot split of a workload's pods (pkg/split,
// docs/placement.md, "On-demand and spot").
const (
	// MaxOnDemandAnnotation on a Deployment, a StatefulSet or a pod
	// template: at most this many of the workload's pods run on on-demand
	// nodes, the others on spot nodes. A non-negative integer.
	MaxOnDemandAnnotation = Prefix + "max-on-demand"
	// CapacitySplitLabel on a pod template: "true" asks for the split of a
	// pod that is not multi-cluster (a single cluster's own pods); "false"
	// keeps a workload out of it, whatever its annotation or policy says.
	// On a namespace, "false" keeps the namespace's pods out of the
	// single-cluster split.
	CapacitySplitLabel = Prefix + "capacity-split"
	// CapacityTypeLabel on a pod is the capacity type the webhook gave it:
	// CapacityOnDemand or CapacitySpot. A pod of a split workload without
	// it was admitted without the split.
	CapacityTypeLabel = Prefix + "capacity-type"
	// OnDemandSlotLabel on an on-demand pod is its place among the
	// workload's on-demand places, 0 to max-on-demand-1: the split is
	// rebuilt from these labels when the agent restarts.
	OnDemandSlotLabel = Prefix + "on-demand-slot"

	// CapacityOnDemand and CapacitySpot are the values of CapacityTypeLabel.
	CapacityOnDemand = "on-demand"
	CapacitySpot     = "spot"

	// PodDeletionCostAnnotation is Kubernetes' own: a ReplicaSet scaling
	// down removes the pods of lower cost first.
	PodDeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"
	// DefaultCapacityNodeLabel is the node label that tells the capacity
	// type when no policy names another, with its default values.
	DefaultCapacityNodeLabel = "node.kubernetes.io/capacity"
)
