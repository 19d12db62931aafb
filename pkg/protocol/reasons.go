package protocol

// Reasons of the PodScheduled condition and Events the source's agent
// writes on a source pod that cannot be fanned out, as `kubectl flotilla
// explain` reads them.
const (
	// ReasonNotInvited: a target's invitation does not cover the pod's
	// namespace.
	ReasonNotInvited = "NotInvited"
	// ReasonObjectMissing: the pod references a ConfigMap or Secret the
	// source does not hold.
	ReasonObjectMissing = "ObjectMissing"
)
