package v1alpha1

// Condition types of Target and ClusterTarget.
const (
	// TargetReady: the target is connected, its candidates are listed and
	// pods are sent there.
	TargetReady = "Ready"
	// TargetReachable: the target's API server answers.
	TargetReachable = "Reachable"
	// TargetAuthorized: the target accepts the source's identity for what
	// the protocol needs.
	TargetAuthorized = "Authorized"
	// TargetCredentialsValid: the kubeconfig could be read and its token is
	// current (renewed before it expires).
	TargetCredentialsValid = "CredentialsValid"
	// TargetOverlapping: another target of this source reaches the same
	// cluster and sends the pods of a namespace to the same namespace
	// there. Both keep working, each with candidates of its own.
	TargetOverlapping = "Overlapping"
)

// Condition types of Source and ClusterSource.
const (
	// SourceReady: the invited identity has its access in every invited
	// namespace.
	SourceReady = "Ready"
	// SourceAccepted: the spec was understood (the identity exists or was
	// made, the namespaces resolved).
	SourceAccepted = "Accepted"
	// SourceNamespaceMissing: an invited namespace does not exist and the
	// invitation does not let the agent create it.
	SourceNamespaceMissing = "NamespaceMissing"
)

// Reasons of conditions. They are CamelCase words an operator can act on.
const (
	ReasonConnected          = "Connected"
	ReasonConnecting         = "Connecting"
	ReasonSecretNotFound     = "SecretNotFound"
	ReasonSecretForbidden    = "SecretForbidden"
	ReasonKubeconfigInvalid  = "KubeconfigInvalid"
	ReasonKubeconfigRefused  = "KubeconfigRefused"
	ReasonUnreachable        = "Unreachable"
	ReasonUnauthorized       = "Unauthorized"
	ReasonForbidden          = "Forbidden"
	ReasonServerError        = "ServerError"
	ReasonTokenRenewalFailed = "TokenRenewalFailed"
	ReasonSummaryInvalid     = "SummaryInvalid"
	ReasonInvalidSpec        = "InvalidSpec"
	ReasonAccepted           = "Accepted"
	ReasonAccessGranted      = "AccessGranted"
	ReasonNamespacesMissing  = "NamespacesMissing"
	ReasonNamespacesPresent  = "NamespacesPresent"
	ReasonApplyFailed        = "ApplyFailed"
	ReasonPolicyPending      = "PolicyPending"
	// ReasonSchedulerDisabled: this cluster's Flotilla release runs no
	// scheduler (the chart's scheduler.enabled=false), so nothing here
	// would schedule the candidates of an invitation or a self target.
	ReasonSchedulerDisabled = "SchedulerDisabled"
	// ReasonVirtualNodeTaken: the target's virtual node belongs to another
	// target (the Ready condition's message names it), or is a node that
	// is no virtual node: nothing runs for this target while it is so.
	ReasonVirtualNodeTaken = "VirtualNodeTaken"
	// ReasonSameClusterAndNamespace: the Overlapping condition is true; its
	// message names the other targets and the namespaces.
	ReasonSameClusterAndNamespace = "SameClusterAndNamespace"
	// ReasonNoOverlap: no other target sends pods where this one does.
	ReasonNoOverlap = "NoOverlap"
	// ReasonCordoned: the Ready condition is true, but the target's
	// virtual node is cordoned (kubectl cordon): no new pod is sent there
	// until it is uncordoned; the pods running there are not touched.
	ReasonCordoned = "Cordoned"
	// ReasonDelegatesLost: the Ready condition is false because several
	// delegates of this source's pods vanished in the target without the
	// source deleting them; no new pod is sent there for a while.
	ReasonDelegatesLost = "DelegatesLost"
	// ReasonRepointing: the Ready condition is false because the target
	// now names another place (API server or namespace mapping): the old
	// place is drained first, while pods still run there.
	ReasonRepointing = "Repointing"
)
