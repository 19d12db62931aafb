package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentConfiguration is the agent's configuration: one file per cluster,
// rendered by the chart from its values. Every field but clusterName has a
// default (SetDefaults); a field left out takes it.
//
// +kubebuilder:object:root=true
type AgentConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// ClusterName is this cluster's name as its targets know it: it labels
	// every candidate this cluster sends, and a target's invitation names
	// it. Required.
	ClusterName string `json:"clusterName"`

	// Namespace is the agent's namespace: where a ClusterTarget's
	// kubeconfig Secret is looked for when its reference names none, and
	// where a ClusterSource's managed ServiceAccount and its kubeconfig
	// Secret are made. Empty: the namespace the agent runs in, or
	// kube-system outside a cluster.
	Namespace string `json:"namespace,omitempty"`

	// TopologyKeys are the node labels the ClusterSummary reports free
	// capacity by; give the scheduler's FlotillaCandidate plugin the same
	// (the chart's topologyKeys sets both). Empty: region, zone and
	// node.kubernetes.io/capacity. At most 16.
	TopologyKeys []string `json:"topologyKeys,omitempty"`

	// SchedulerEnabled says that this cluster runs Flotilla's scheduler,
	// which schedules the candidates of invited sources and of a self
	// target. false: every invitation (Source, ClusterSource) and a self
	// target is reported not Ready with reason SchedulerDisabled. Default
	// true.
	SchedulerEnabled *bool `json:"schedulerEnabled,omitempty"`

	// Placement is the source side's placement of its pods.
	Placement Placement `json:"placement,omitempty"`
	// VirtualNodes are the nodes that stand for the targets.
	VirtualNodes VirtualNodes `json:"virtualNodes,omitempty"`
	// Targets is the source side's connection to its targets.
	Targets Targets `json:"targets,omitempty"`
	// Invitations is the target side: the access given to invited sources
	// and the ClusterSummaries published for them.
	Invitations Invitations `json:"invitations,omitempty"`
	// Webhook is the pod admission webhook.
	Webhook Webhook `json:"webhook,omitempty"`
	// ClientConnection is how hard the agent may query each API server,
	// its own and each target's.
	ClientConnection ClientConnection `json:"clientConnection,omitempty"`
	// LeaderElection elects the one active agent of a cluster.
	LeaderElection LeaderElection `json:"leaderElection,omitempty"`

	// MetricsBindAddress is where Prometheus metrics (and /debug/state)
	// are served; "0" disables them. Default ":8080".
	MetricsBindAddress string `json:"metricsBindAddress,omitempty"`
	// HealthProbeBindAddress is where /healthz and /readyz are served.
	// Default ":8081".
	HealthProbeBindAddress string `json:"healthProbeBindAddress,omitempty"`
	// PprofBindAddress is where Go's /debug/pprof profiles are served;
	// empty disables them.
	PprofBindAddress string `json:"pprofBindAddress,omitempty"`
}

// Placement is how the source places its pods.
type Placement struct {
	// Workers are the source pods placed at once. Most of a placement is
	// waiting on API calls, so this is worth more than the cores. Default
	// 64.
	Workers *int32 `json:"workers,omitempty"`
	// MaxCandidates are the targets that get a candidate of a pod at first
	// (0: every target). They are drawn by a hash of the pod's UID
	// weighted by each target's room for the pod, how fast and how often
	// it found a node, and the placement policy's preferences; the set
	// widens by this many while every target in it cannot run the pod.
	// Default 2.
	MaxCandidates *int32 `json:"maxCandidates,omitempty"`
	// ElectionTimeout is how long an elected candidate may stay unbound
	// while its target answers before the source revokes it (deletes it
	// unless it bound meanwhile) and elects another target; keep it above
	// the targets' Permit timeout. 0: never. Default 1m.
	ElectionTimeout *metav1.Duration `json:"electionTimeout,omitempty"`
	// DenyAfter is how long another target's candidate must have stood
	// elected and unbound before the source denies the pod's other
	// candidates, so that they hold no node in their targets; the denials
	// are lifted if that election ends without binding. 0: never. Default
	// 10s.
	DenyAfter *metav1.Duration `json:"denyAfter,omitempty"`
	// LocalOverflowAfter is, with a self target's localFirst, how long a
	// pod kept in this cluster may wait with no node for it before the
	// agent evicts it, so that its controller makes a pod that goes
	// through the targets (a pod without a controller only gets an Event).
	// 0: never. Default 30s.
	LocalOverflowAfter *metav1.Duration `json:"localOverflowAfter,omitempty"`
}

// VirtualNodes are the nodes that stand for the targets in this cluster.
type VirtualNodes struct {
	// Workers are, per virtual node, the source pods whose status is
	// mirrored at once. Default 16.
	Workers *int32 `json:"workers,omitempty"`
	// NotReadyAfter is how long a target's API must fail to answer before
	// its virtual node turns NotReady. Default 20s.
	NotReadyAfter *metav1.Duration `json:"notReadyAfter,omitempty"`
	// NotReadyTolerationSeconds is how long a source pod stays on a
	// NotReady virtual node before it is evicted and its controller
	// recreates it elsewhere; the webhook writes it as the pod's
	// node.kubernetes.io/not-ready toleration unless the pod has one of
	// its own. -1: never evicted. Default 60.
	NotReadyTolerationSeconds *int64 `json:"notReadyTolerationSeconds,omitempty"`
	// Kubelet is the kubelet API of the virtual nodes.
	Kubelet Kubelet `json:"kubelet,omitempty"`
}

// Kubelet is the kubelet API of the virtual nodes: logs, exec, attach and
// port-forward of source pods placed in other clusters.
type Kubelet struct {
	// Port is published in the virtual nodes' daemonEndpoints; 0 disables
	// the API. Default 10250.
	Port *int32 `json:"port,omitempty"`
	// BindAddress is the address the API binds to; empty means all.
	BindAddress string `json:"bindAddress,omitempty"`
	// Address is the IP the virtual nodes publish as their InternalIP,
	// where the API server reaches this API: the agent pod's own IP, so
	// usually given per process (--kubelet-address). Empty: the nodes
	// publish no address, and logs and exec fail.
	Address string `json:"address,omitempty"`
	// CertFile and KeyFile are the serving certificate and key (PEM), read
	// again when they change. Empty: a self-signed certificate for
	// Address, made at start.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
}

// Targets is the source side's connection to its targets.
type Targets struct {
	// TokenRenewAfter is the share of a target token's lifetime after
	// which the source renews it (a TokenRequest for its own
	// ServiceAccount), between 0 and 1. Default 0.5.
	TokenRenewAfter *float64 `json:"tokenRenewAfter,omitempty"`
	// TenantPodCIDRs are the networks inside which a namespaced Target's
	// spec.podCIDRs must lie (a tenant's target could otherwise make this
	// cluster's Services send traffic to any address). Empty: a namespaced
	// Target may name none, and its pods show no pod IP.
	TenantPodCIDRs []string `json:"tenantPodCIDRs,omitempty"`
}

// Invitations is the target side.
type Invitations struct {
	// Server is the URL at which sources reach this cluster's API server,
	// written into the kubeconfig of each invitation's managed
	// ServiceAccount. Empty: the server the agent itself talks to.
	Server string `json:"server,omitempty"`
	// TokenTTL is the lifetime of the token in that kubeconfig (10m or
	// more, the API server's minimum); the source renews it itself before
	// it expires. Default 24h.
	TokenTTL *metav1.Duration `json:"tokenTTL,omitempty"`
	// SummaryInterval is how often at most each ClusterSummary is
	// written, however fast nodes and pods change. Default 5s.
	SummaryInterval *metav1.Duration `json:"summaryInterval,omitempty"`
}

// Webhook is the pod admission webhook that every replica serves.
type Webhook struct {
	// Port of the webhook server. Default 9443.
	Port *int32 `json:"port,omitempty"`
	// Host is the address it binds to; empty means all.
	Host string `json:"host,omitempty"`
	// CertDir is a writable folder where the agent copies the serving
	// certificate from CertSecret; the server reloads it when it changes.
	// Default: flotilla-agent-webhook in the system's temporary folder.
	CertDir string `json:"certDir,omitempty"`
	// CertSecret holds the webhook's CA and serving certificate: created
	// empty when missing, filled and rotated by the leader, whose CA goes
	// into the webhook configuration. Default name
	// flotilla-agent-webhook-cert; namespace: the agent's.
	CertSecret ObjectReference `json:"certSecret,omitempty"`
	// Hosts are the DNS names of the serving certificate (in a cluster,
	// <service>.<namespace>.svc); no IP addresses, so URL must name one of
	// them. Default [localhost].
	Hosts []string `json:"hosts,omitempty"`
	// URL is where the API server calls the webhook (an agent outside the
	// cluster); when empty, Service is used.
	URL string `json:"url,omitempty"`
	// Service is in front of the agent's webhook; with URL and Service's
	// name empty, the agent does not register its webhook. Namespace: the
	// agent's.
	Service ObjectReference `json:"service,omitempty"`
	// ConfigurationName is the MutatingWebhookConfiguration the agent
	// keeps up to date. Default flotilla-agent.
	ConfigurationName string `json:"configurationName,omitempty"`
	// InjectOnly says that someone else keeps that configuration (the Helm
	// chart, so that uninstalling removes it): the agent only injects its
	// CA into it, and URL and Service are not used.
	InjectOnly bool `json:"injectOnly,omitempty"`
	// KeepManagedFields keeps a source pod's metadata.managedFields. By
	// default the webhook drops them when it makes a source pod, so that
	// the API server no longer tracks which manager wrote which field of
	// it: its election and its mirrored status are then written without
	// that bookkeeping (docs/benchmarks.md measures what it saves), and
	// the pod is smaller in every watch. A server-side apply to the pod
	// starts the tracking again.
	KeepManagedFields bool `json:"keepManagedFields,omitempty"`
}

// ObjectReference names an object of a namespace.
type ObjectReference struct {
	Name string `json:"name,omitempty"`
	// Namespace; empty: the agent's namespace.
	Namespace string `json:"namespace,omitempty"`
}

// ClientConnection is the rate of the agent's queries to each API server.
type ClientConnection struct {
	// QPS is the sustained queries per second. Default 200.
	QPS *float64 `json:"qps,omitempty"`
	// Burst of queries. Default 400.
	Burst *int32 `json:"burst,omitempty"`
}

// LeaderElection elects the one active agent of a cluster through a Lease,
// so that replicas can stand by.
type LeaderElection struct {
	// LeaderElect turns the election on. Default true.
	LeaderElect *bool `json:"leaderElect,omitempty"`
	// ResourceName is the Lease's name. Default flotilla-agent.
	ResourceName string `json:"resourceName,omitempty"`
	// ResourceNamespace is the Lease's namespace; empty: the agent's
	// namespace.
	ResourceNamespace string `json:"resourceNamespace,omitempty"`
	// LeaseDuration is how long standby agents wait before taking over a
	// lease that was not renewed. Default 15s.
	LeaseDuration *metav1.Duration `json:"leaseDuration,omitempty"`
	// RenewDeadline is how long the active agent keeps trying to renew
	// its lease before it steps down. Default 10s.
	RenewDeadline *metav1.Duration `json:"renewDeadline,omitempty"`
	// RetryPeriod is how often agents try to acquire or renew the lease.
	// Default 2s.
	RetryPeriod *metav1.Duration `json:"retryPeriod,omitempty"`
}
