package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SourceCommon is what Source and ClusterSource share: who is invited and
// what that identity may do.
type SourceCommon struct {
	// ClusterName is the source cluster's name, as its agent's
	// configuration names it (clusterName): the invited identity may only
	// create candidates labelled as this cluster's.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
	ClusterName string `json:"clusterName"`

	// Identity is who the source is in this cluster.
	Identity SourceIdentity `json:"identity"`

	// CreateNamespaces lets the target's agent create invited namespaces
	// that do not exist (labelled as Flotilla's), so that a user does not
	// create them in every cluster by hand.
	// +optional
	CreateNamespaces bool `json:"createNamespaces,omitempty"`

	// AllowPrivileged lets the source's candidates be privileged, use
	// hostPath volumes, the host's network, PID or IPC namespaces. Off, the
	// admission policy refuses such candidates.
	// +optional
	AllowPrivileged bool `json:"allowPrivileged,omitempty"`

	// AllowPriorityClasses are the PriorityClasses the source's candidates
	// may name. A candidate with any other priorityClassName is refused;
	// classes whose name starts with "system-" are never allowed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.all(c, !c.startsWith('system-'))",message="spec.allowPriorityClasses may not name a system- class: those preempt the cluster's own critical pods"
	AllowPriorityClasses []string `json:"allowPriorityClasses,omitempty"`

	// AllowEphemeralVolumes lets the source's candidates use generic
	// ephemeral volumes, for which this cluster creates a
	// PersistentVolumeClaim on the source's behalf. Off, they are refused.
	// +optional
	AllowEphemeralVolumes bool `json:"allowEphemeralVolumes,omitempty"`

	// AllowPersistentVolumeClaims lets the source's candidates mount
	// PersistentVolumeClaims of the invited namespaces by name. Off, they
	// are refused: a claim there is this cluster's, and a candidate that
	// mounts one (which the source may then exec into) would read and
	// write its data.
	// +optional
	AllowPersistentVolumeClaims bool `json:"allowPersistentVolumeClaims,omitempty"`

	// AllowResourceClaims lets the source's candidates claim devices
	// (spec.resourceClaims, Dynamic Resource Allocation), for which this
	// cluster may create ResourceClaims on the source's behalf. Off, they
	// are refused.
	// +optional
	AllowResourceClaims bool `json:"allowResourceClaims,omitempty"`

	// KeepSourceLabels lets the source's candidates carry the labels of
	// their source pods, so that this cluster's Services, NetworkPolicies
	// and controllers select them as they select the source pods at home.
	// Off (the default), a candidate carries Flotilla's labels and its
	// source pod's labels renamed under label.multicluster.flotilla.dev/
	// (its own pod affinity and spread rewritten to match), so that
	// nothing of this cluster selects a source's pods by accident.
	// +optional
	KeepSourceLabels bool `json:"keepSourceLabels,omitempty"`

	// MaxTokenLifetime bounds the lifetime of the tokens the invited
	// ServiceAccount may request for itself; default 12h, at least 10m
	// (the API server's shortest token).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10m') && duration(self) <= duration('8760h')",message="spec.maxTokenLifetime must be between 10m and 8760h"
	MaxTokenLifetime *metav1.Duration `json:"maxTokenLifetime,omitempty"`

	// Quota bounds what the source's pods may hold in this cluster at once.
	// +optional
	Quota *SourceQuota `json:"quota,omitempty"`
}

// DefaultMaxTokenLifetime is MaxTokenLifetime when an invitation sets none.
const DefaultMaxTokenLifetime = 12 * time.Hour

// MinTokenLifetime is the shortest token the API server issues, and the
// shortest MaxTokenLifetime an invitation may set.
const MinTokenLifetime = 10 * time.Minute

// TokenLifetime is the longest token the invited identity may request.
func (c *SourceCommon) TokenLifetime() time.Duration {
	if c.MaxTokenLifetime == nil || c.MaxTokenLifetime.Duration <= 0 {
		return DefaultMaxTokenLifetime
	}
	return c.MaxTokenLifetime.Duration
}

// SourceIdentity names the invited identity: a ServiceAccount the target's
// agent creates and whose tokens the source renews itself (the default),
// or an identity that exists already. Exactly one field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.managedServiceAccount), has(self.serviceAccount), has(self.user)].filter(x, x).size() == 1",message="exactly one of spec.identity.managedServiceAccount, spec.identity.serviceAccount and spec.identity.user must be set"
type SourceIdentity struct {
	// ManagedServiceAccount: the target's agent creates this ServiceAccount
	// (in the agent's namespace for a ClusterSource, in the Source's
	// namespace for a Source), writes a kubeconfig for it in a Secret, and
	// deletes it when the invitation is deleted.
	// +optional
	ManagedServiceAccount *ManagedServiceAccount `json:"managedServiceAccount,omitempty"`
	// ServiceAccount invites an existing ServiceAccount.
	// +optional
	ServiceAccount *ServiceAccountRef `json:"serviceAccount,omitempty"`
	// User invites a user as the target's authenticator names it (a
	// client certificate's CN, an OIDC subject...).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	User string `json:"user,omitempty"`
}

// ManagedServiceAccount is a ServiceAccount the target's agent manages.
type ManagedServiceAccount struct {
	// Name of the ServiceAccount; default flotilla-source-<invitation name>.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name,omitempty"`
}

// ServiceAccountRef names an existing ServiceAccount.
type ServiceAccountRef struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// SourceQuota is what a source's pods may hold at once in this cluster;
// the target's scheduler enforces it (docs/invite-a-source.md, Quotas).
type SourceQuota struct {
	// CPU requested by the source's pods.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!string(self).startsWith('-')",message="spec.quota.cpu must not be negative"
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory requested by the source's pods.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!string(self).startsWith('-')",message="spec.quota.memory must not be negative"
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Pods of the source at once.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Pods *int32 `json:"pods,omitempty"`
}

// SourceSpec is the spec of a Source: it invites a source into the
// Source's namespace.
type SourceSpec struct {
	SourceCommon `json:",inline"`
}

// ClusterSourceSpec is the spec of a ClusterSource: it invites a source into
// namespaces listed or selected by label.
// +kubebuilder:validation:XValidation:rule="has(self.namespaces) != has(self.namespaceSelector)",message="exactly one of spec.namespaces and spec.namespaceSelector must be set",fieldPath=".namespaces"
type ClusterSourceSpec struct {
	SourceCommon `json:",inline"`

	// Namespaces invited by name.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceSelector invites the existing namespaces whose labels match.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// SourceStatus is what the target's agent did with an invitation.
type SourceStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Accepted, NamespaceMissing.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Namespaces the invitation covers now.
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// ServiceAccount is the invited ServiceAccount, "<namespace>/<name>".
	// +optional
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// KubeconfigSecret is the Secret, in the agent's namespace (a
	// ClusterSource) or the Source's, that holds a kubeconfig for the
	// source: copy it to the source cluster and name it in a Target or
	// ClusterTarget. Only for a managed ServiceAccount.
	// +optional
	KubeconfigSecret string `json:"kubeconfigSecret,omitempty"`
	// Summary is the ClusterSummary the source reads.
	// +optional
	Summary string `json:"summary,omitempty"`
}

// Source invites a source cluster's identity into the Source's namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Source struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SourceSpec   `json:"spec"`
	Status SourceStatus `json:"status,omitempty"`
}

// SourceList is a list of Sources.
//
// +kubebuilder:object:root=true
type SourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Source `json:"items"`
}

// ClusterSource invites a source cluster's identity into several namespaces.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.status.namespaces`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterSource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterSourceSpec `json:"spec"`
	Status SourceStatus      `json:"status,omitempty"`
}

// ClusterSourceList is a list of ClusterSources.
//
// +kubebuilder:object:root=true
type ClusterSourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterSource `json:"items"`
}

func init() {
	register(&Source{}, &SourceList{}, &ClusterSource{}, &ClusterSourceList{})
}
