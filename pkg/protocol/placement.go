package protocol

const (
	// PlacementPolicyAnnotation on a pod names the PlacementPolicy of its
	// namespace that governs it, whatever the policies' selectors say.
	PlacementPolicyAnnotation = Prefix + "placement-policy"
	// DomainAnnotation on a candidate is the topology domain the source
	// counted it in, JSON: the values of the policy's spread keys in order.
	// The candidate's node affinity pins it there when its target spans
	// several domains.
	DomainAnnotation = Prefix + "domain"
)
