package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TargetCommon is what Target and ClusterTarget share.
type TargetCommon struct {
	// Self makes this cluster its own target: pods may run here, through
	// the same protocol, with the agent's own identity. Exactly one of self
	// and kubeconfigSecretRef (on a ClusterTarget: or clusterProfileRef)
	// is set.
	// +optional
	Self bool `json:"self,omitempty"`

	// LocalFirst, on a self target, keeps an opted-in pod in this cluster
	// as an ordinary pod of its own scheduler when a node here has room for
	// it at admission: no candidate, no virtual node, no election. Only the
	// pods that do not fit (and those a PlacementPolicy with a cluster
	// selector, cluster affinity or spread governs) become source pods and
	// go through the targets. A pod kept here that does not fit after all
	// waits here, as any pod of a full cluster does.
	// +optional
	LocalFirst bool `json:"localFirst,omitempty"`

	// Labels are carried by the target's virtual node (region, zone,
	// provider, capacity type...), for placement policy and for
	// `kubectl get nodes -L`. Flotilla's own node labels cannot be
	// replaced.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$'))",message="every key of spec.labels must be a label key (an optional DNS prefix and '/', then a name of at most 63 characters)"
	Labels map[string]LabelValue `json:"labels,omitempty"`

	// PodCIDRs are the target's pod networks that this cluster routes to
	// (a flat or peered network). A delegate's pod IP is mirrored onto its
	// source pod, where Services and Endpoints of this cluster would send
	// traffic to it, only when it lies inside one of them; otherwise the
	// source pod shows no pod IP. Empty (the default): no pod IP is
	// mirrored.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) && cidr(c) == cidr(c).masked())",message="every item of spec.podCIDRs must be a network in CIDR notation, such as 10.244.0.0/16"
	PodCIDRs []string `json:"podCIDRs,omitempty"`
}

// LabelValue is the value of a label.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
type LabelValue string

// StringMap returns the labels as a plain map.
func (c *TargetCommon) StringMap() map[string]string {
	if c.Labels == nil {
		return nil
	}
	out := make(map[string]string, len(c.Labels))
	for k, v := range c.Labels {
		out[k] = string(v)
	}
	return out
}

// TargetSpec is the spec of a Target.
// +kubebuilder:validation:XValidation:rule="!(has(self.localFirst) && self.localFirst) || (has(self.self) && self.self)",message="spec.localFirst needs spec.self: only this cluster's own pods can stay in it",fieldPath=".localFirst"
// +kubebuilder:validation:XValidation:rule="(has(self.self) && self.self) != has(self.kubeconfigSecretRef)",message="exactly one of spec.self and spec.kubeconfigSecretRef must be set",fieldPath=".kubeconfigSecretRef"
type TargetSpec struct {
	TargetCommon `json:",inline"`

	// KubeconfigSecretRef names a Secret of the Target's namespace holding
	// a kubeconfig for the target cluster (as written by the target's
	// agent for this source's invitation). A Target cannot name a
	// ClusterProfile: the cluster inventory is the cluster admin's, not a
	// tenant's of one namespace.
	// +optional
	KubeconfigSecretRef *LocalSecretKeyRef `json:"kubeconfigSecretRef,omitempty"`

	// TargetNamespace is where this namespace's pods go in the target;
	// default: the namespace of the same name.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TargetNamespace string `json:"targetNamespace,omitempty"`
}

// ClusterTargetSpec is the spec of a ClusterTarget.
// +kubebuilder:validation:XValidation:rule="!(has(self.localFirst) && self.localFirst) || (has(self.self) && self.self)",message="spec.localFirst needs spec.self: only this cluster's own pods can stay in it",fieldPath=".localFirst"
// +kubebuilder:validation:XValidation:rule="[has(self.self) && self.self, has(self.kubeconfigSecretRef), has(self.clusterProfileRef)].filter(x, x).size() == 1",message="exactly one of spec.self, spec.kubeconfigSecretRef and spec.clusterProfileRef must be set",fieldPath=".kubeconfigSecretRef"
type ClusterTargetSpec struct {
	TargetCommon `json:",inline"`

	// KubeconfigSecretRef names a Secret holding a kubeconfig for the
	// target cluster.
	// +optional
	KubeconfigSecretRef *SecretKeyRef `json:"kubeconfigSecretRef,omitempty"`

	// ClusterProfileRef names a ClusterProfile of the Cluster Inventory
	// API (multicluster.x-k8s.io/v1alpha1) in this cluster: the target's
	// server and CA come from one of its access providers, the bearer
	// token from a Secret of this cluster, and the profile's labels and
	// properties become the virtual node's labels (spec.labels win).
	// +optional
	ClusterProfileRef *ClusterProfileRef `json:"clusterProfileRef,omitempty"`

	// NamespaceMapping sends the pods of a source namespace to a namespace
	// of another name in the target; unmapped namespaces keep their name.
	// +optional
	// +listType=map
	// +listMapKey=source
	// +kubebuilder:validation:MaxItems=256
	NamespaceMapping []NamespaceMapping `json:"namespaceMapping,omitempty"`
}

// ClusterProfileRef names a ClusterProfile and says how to reach the
// cluster it stands for.
type ClusterProfileRef struct {
	// Namespace of the ClusterProfile.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// Name of the ClusterProfile.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// AccessProvider names the entry of the profile's
	// status.accessProviders (or, deprecated, status.credentialProviders)
	// whose cluster gives the server and its CA; default: the profile's
	// only entry.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	AccessProvider string `json:"accessProvider,omitempty"`
	// TokenSecretRef names the Secret whose key holds the bearer token
	// sent to that server; default: the Secret of the profile's name in
	// the agent's namespace, key "token" (the shape the Cluster Inventory
	// API's secretreader convention gives a consumer's Secret). The
	// token of a ServiceAccount is renewed in that key before it expires.
	// +optional
	TokenSecretRef *TokenSecretRef `json:"tokenSecretRef,omitempty"`
	// AllowedServers, when set, are the only servers (scheme, host and
	// port, as https://host:port) the profile may name: whoever may write
	// the profile's status otherwise chooses where the token is sent.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	AllowedServers []string `json:"allowedServers,omitempty"`
}

// TokenSecretRef names the key of a Secret that holds a bearer token.
type TokenSecretRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the Secret; default: the agent's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
	// Key of the token in the Secret's data; default "token".
	// +optional
	// +kubebuilder:default=token
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// Reasons of a ClusterTarget that names a ClusterProfile.
const (
	// ReasonClusterProfileAPIMissing: this cluster serves no ClusterProfile
	// API (its CRD is not installed).
	ReasonClusterProfileAPIMissing = "ClusterProfileAPIMissing"
	// ReasonClusterProfileNotFound: the named ClusterProfile does not
	// exist (deleted, or not made yet).
	ReasonClusterProfileNotFound = "ClusterProfileNotFound"
	// ReasonClusterProfileInvalid: the profile names no usable access
	// provider, or its token Secret holds no token.
	ReasonClusterProfileInvalid = "ClusterProfileInvalid"
	// ReasonClusterProfileRefused: the profile asks what Flotilla will not
	// do (a server without verified TLS, a file, a proxy, a plugin's
	// input, a server outside allowedServers).
	ReasonClusterProfileRefused = "ClusterProfileRefused"
)

// LocalSecretKeyRef names a key of a Secret in the same namespace.
type LocalSecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key of the kubeconfig in the Secret's data; default "kubeconfig".
	// +optional
	// +kubebuilder:default=kubeconfig
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// SecretKeyRef names a key of a Secret.
type SecretKeyRef struct {
	LocalSecretKeyRef `json:",inline"`
	// Namespace of the Secret; default: the agent's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// NamespaceMapping maps a source namespace to a target namespace.
type NamespaceMapping struct {
	// Source namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Source string `json:"source"`
	// Target namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Target string `json:"target"`
}

// TargetStatus is what the source's agent observed of a target.
type TargetStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reachable, Authorized, CredentialsValid.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// VirtualNode is the node that stands for the target in this cluster.
	// +optional
	VirtualNode string `json:"virtualNode,omitempty"`
	// Namespaces the target's invitation covers, as it publishes them; empty
	// when the target publishes none (self, or an identity that may use
	// every namespace).
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// TokenExpirationTime is when the current token of the kubeconfig
	// expires; the agent renews it before.
	// +optional
	TokenExpirationTime *metav1.Time `json:"tokenExpirationTime,omitempty"`
}

// Target is a target cluster for the pods of one namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.virtualNode`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Target struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TargetSpec   `json:"spec"`
	Status TargetStatus `json:"status,omitempty"`
}

// TargetList is a list of Targets.
//
// +kubebuilder:object:root=true
type TargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Target `json:"items"`
}

// ClusterTarget is a target cluster for the pods of every opted-in namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=flotilla
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.virtualNode`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterTargetSpec `json:"spec"`
	Status TargetStatus      `json:"status,omitempty"`
}

// ClusterTargetList is a list of ClusterTargets.
//
// +kubebuilder:object:root=true
type ClusterTargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterTarget `json:"items"`
}

func init() {
	register(&Target{}, &TargetList{}, &ClusterTarget{}, &ClusterTargetList{})
}
