package protocol

// The invitation handshake: what a target's agent writes for an invited
// source, what `kubectl flotilla invite` hands over and `kubectl flotilla
// join` reads, and what the source's agent renews.
const (
	// InvitationKubeconfigKey is the key of the invited identity's
	// kubeconfig in the Secret a target's agent writes for an invitation,
	// and in the Secret `kubectl flotilla join` makes of it in the source.
	InvitationKubeconfigKey = "kubeconfig"
	// InvitationSummaryKey is the key, in the same Secret, of the name of
	// the ClusterSummary the source may read.
	InvitationSummaryKey = "summary"
	// InvitationExpiresAnnotation on that Secret is when its token expires
	// (RFC 3339); absent for a kubeconfig that does not expire.
	InvitationExpiresAnnotation = Prefix + "token-expires"
	// InvitationLabel is on every object a target's agent makes for an
	// invitation (the Secret, RBAC, admission policy, summary): it names
	// the invitation, "clustersource.<name>" or
	// "source.<namespace>.<name>", hashed to fit a label value when longer.
	InvitationLabel = Prefix + "invitation"
	// ManagedNamespaceLabel marks a namespace a target's agent created for
	// an invitation (the invitation's createNamespaces): its value names
	// the invitation as InvitationLabel does.
	ManagedNamespaceLabel = Prefix + "created-for"
)
