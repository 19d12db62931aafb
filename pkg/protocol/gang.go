package protocol

// A gang is a set of source pods placed all or nothing: none is allowed
// to bind until enough of them hold reservations that together satisfy
// the gang's mode.
const (
	// PodGroupLabel names the gang a pod belongs to, among the pods of its
	// namespace: the label of scheduler-plugins' coscheduling.
	PodGroupLabel = "scheduling.x-k8s.io/pod-group"
	// GangMinMemberAnnotation is, on a member, how many members must hold
	// their places at once before any is allowed to bind (a positive
	// integer); every member gives the same.
	GangMinMemberAnnotation = Prefix + "gang-min-member"
	// GangModeAnnotation is, on a member, where the gang may go:
	// GangOneCluster (the default) or GangAnyClusters.
	GangModeAnnotation = Prefix + "gang-mode"
)

// Gang modes.
const (
	// GangOneCluster places every member in one target: for jobs that need
	// a fast interconnect between their members.
	GangOneCluster = "oneCluster"
	// GangAnyClusters lets members go to different targets, still all or
	// nothing.
	GangAnyClusters = "anyClusters"
)

// GangAnnotation, on a member, asks for a gang of the pod's owner, sized
// by the owner's parallelism: GangOfJob (the pod's Job) or GangOfJobSet
// (the JobSet its Job belongs to).
const GangAnnotation = Prefix + "gang"

// What GangAnnotation may ask for.
const (
	GangOfJob    = "job"
	GangOfJobSet = "jobset"
)

// JobSetNameLabel is the label JobSet's controller puts on the pods of its
// Jobs: the JobSet's name.
const JobSetNameLabel = "jobset.sigs.k8s.io/jobset-name"
