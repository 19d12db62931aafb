// Package invitation is the target side of an invitation: it turns each
// Source and ClusterSource into the invited identity's least-privilege
// access (RBAC in the invited namespaces and a ValidatingAdmissionPolicy
// that pins what it may create), the invited namespaces, a kubeconfig for a
// managed ServiceAccount, and the ClusterSummary the source reads. Deleting
// the invitation removes all of it and the source's waiting candidates.
//
// The objects it renders are pure functions of the invitation (this file);
// the controller applies them.
package invitation

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Labels on every object made for an invitation, spelled in pkg/protocol
// (the invitation handshake) and named here too for the agent's tests.
const (
	// InvitationLabel is protocol.InvitationLabel.
	InvitationLabel = protocol.InvitationLabel
	// ManagedNamespaceLabel is protocol.ManagedNamespaceLabel.
	ManagedNamespaceLabel = protocol.ManagedNamespaceLabel
)

// Invitation is a Source or ClusterSource as the controller sees it.
type Invitation struct {
	// Kind is "Source" or "ClusterSource"; Namespace is a Source's.
	Kind, Namespace, Name string
	Spec                  v1alpha1.SourceCommon
	// Namespaces it covers, resolved.
	Namespaces []string
	// AgentNamespace is where a ClusterSource's managed ServiceAccount and
	// kubeconfig Secret live.
	AgentNamespace string
	// APIAudiences are the audiences this API server gives a token whose
	// request names none: the only ones the identity may ask for. Empty
	// while the agent has not learnt them; no token request passes then.
	APIAudiences []string
}

// ID is the invitation's label value and the stem of its objects' names.
func (inv Invitation) ID() string {
	raw := "clustersource." + inv.Name
	if inv.Kind == "Source" {
		raw = "source." + inv.Namespace + "." + inv.Name
	}
	return truncate(raw, 63)
}

// Ref is how statuses and summaries name the invitation.
func (inv Invitation) Ref() string {
	if inv.Kind == "Source" {
		return inv.Namespace + "/" + inv.Name
	}
	return inv.Name
}

// objectName is the name of the invitation's RBAC objects, policy and
// summary: flotilla-<id>, within the 253 characters of most names.
func (inv Invitation) objectName() string { return "flotilla-" + inv.ID() }

// SummaryName is the ClusterSummary the source reads.
func (inv Invitation) SummaryName() string { return inv.objectName() }

// ServiceAccount is the invited ServiceAccount's namespace and name; empty
// for a user.
func (inv Invitation) ServiceAccount() (namespace, name string) {
	id := inv.Spec.Identity
	switch {
	case id.ServiceAccount != nil:
		return id.ServiceAccount.Namespace, id.ServiceAccount.Name
	case id.ManagedServiceAccount != nil:
		ns := inv.AgentNamespace
		if inv.Kind == "Source" {
			ns = inv.Namespace
		}
		name := id.ManagedServiceAccount.Name
		if name == "" {
			name = truncate("flotilla-source-"+inv.Name, 253)
		}
		return ns, name
	}
	return "", ""
}

// KubeconfigSecretName is the Secret, beside a managed ServiceAccount, that
// holds the kubeconfig handed to the source.
func (inv Invitation) KubeconfigSecretName() string {
	_, sa := inv.ServiceAccount()
	return truncate(sa, 242) + "-kubeconfig"
}

// Username is how the API server names the invited identity in requests.
func (inv Invitation) Username() string {
	if inv.Spec.Identity.User != "" {
		return inv.Spec.Identity.User
	}
	ns, name := inv.ServiceAccount()
	return "system:serviceaccount:" + ns + ":" + name
}

func (inv Invitation) subject() rbacv1.Subject {
	if inv.Spec.Identity.User != "" {
		return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: inv.Spec.Identity.User}
	}
	ns, name := inv.ServiceAccount()
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
}

func (inv Invitation) meta(namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: inv.objectName(), Namespace: namespace,
		Labels: map[string]string{protocol.InvitationLabel: inv.ID(), "app.kubernetes.io/managed-by": "flotilla"},
	}
}

// Role is what the source may do in one invited namespace: its candidates,
// and the ConfigMaps and Secrets they reference. It may not read Secrets or
// ConfigMaps, only write the ones labelled as its own (the policy checks
// the label). It grants no logs and no streams: those of the source's own
// delegates, by name, are StreamsRole's (streams.go).
func (inv Invitation) Role(namespace string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: inv.meta(namespace),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"create", "update", "patch", "delete"}},
		},
	}
}

// streamSubresources are the pod streams a source opens to its delegates.
var streamSubresources = []string{"pods/exec", "pods/attach", "pods/portforward"}

// candidateNamePattern matches the names protocol.CandidateName makes: a
// name, "-" and 10 hex digits. An admission policy cannot see the labels of
// the pod a stream is opened to (CONNECT carries only its options), so the
// name is all the policy checks: it keeps the source's streams off the
// pods of Deployments, ReplicaSets, StatefulSets, DaemonSets and Jobs,
// whose names end otherwise, but not off a bare pod someone named that way.
// What grants a stream is the streams Role, which names the source's
// delegates (streams.go); this is defence in depth (docs/invitations-reference.md).
const candidateNamePattern = "^.+-[0-9a-f]{10}$"

// RoleBinding binds Role to the invited identity.
func (inv Invitation) RoleBinding(namespace string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: inv.meta(namespace),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: inv.objectName()},
		Subjects:   []rbacv1.Subject{inv.subject()},
	}
}

// TokenRole lets a managed ServiceAccount renew its own tokens, and nothing
// else about ServiceAccounts.
func (inv Invitation) TokenRole() *rbacv1.Role {
	ns, name := inv.ServiceAccount()
	r := &rbacv1.Role{ObjectMeta: inv.meta(ns)}
	r.Name = inv.objectName() + "-token"
	r.Rules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{name}, Verbs: []string{"create"}}}
	return r
}

// TokenRoleBinding binds TokenRole.
func (inv Invitation) TokenRoleBinding() *rbacv1.RoleBinding {
	ns, _ := inv.ServiceAccount()
	b := &rbacv1.RoleBinding{ObjectMeta: inv.meta(ns)}
	b.Name = inv.objectName() + "-token"
	b.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: b.Name}
	b.Subjects = []rbacv1.Subject{inv.subject()}
	return b
}

// ClusterRole lets the source read its own ClusterSummary, by name.
func (inv Invitation) ClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: inv.meta(""),
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"clustersummaries"},
			ResourceNames: []string{inv.SummaryName()}, Verbs: []string{"get", "list", "watch"},
		}},
	}
}

// ClusterRoleBinding binds ClusterRole.
func (inv Invitation) ClusterRoleBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: inv.meta(""),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: inv.objectName()},
		Subjects:   []rbacv1.Subject{inv.subject()},
	}
}

// Policy pins what the invited identity may create, change and delete, in
// the API server itself (CEL, no webhook): only candidates of its own
// cluster, scheduled by Flotilla's profile on a node it does not choose,
// at a priority the invitation allows, meeting the Pod Security Standards'
// baseline unless privileged pods are allowed, making this cluster create
// nothing on its behalf; only its own candidates, ConfigMaps and Secrets
// changed or deleted, with no finalizers, owners or labels that change how
// this cluster treats them; only tokens of its own, bounded (admission.go).
func (inv Invitation) Policy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	cluster := strconv.Quote(inv.Spec.ClusterName) // a CEL string literal
	ownLabel := fmt.Sprintf("has(object.metadata.labels) && %q in object.metadata.labels && object.metadata.labels[%q] == %s",
		protocol.SourceClusterLabel, protocol.SourceClusterLabel, cluster)
	oldOwnLabel := strings.ReplaceAll(ownLabel, "object.", "oldObject.")
	notPod := "request.resource.resource != 'pods'"
	validations := []admissionregistrationv1.Validation{
		{
			Expression: "request.operation == 'DELETE' || (" + ownLabel + ")",
			Message:    fmt.Sprintf("source %s may only write objects labelled %s=%s", inv.Spec.ClusterName, protocol.SourceClusterLabel, inv.Spec.ClusterName),
		},
		{
			Expression: "request.operation == 'CREATE' || (" + oldOwnLabel + ")",
			Message:    fmt.Sprintf("source %s may not change or delete what another source or the cluster's users made", inv.Spec.ClusterName),
		},
		{
			Expression: fmt.Sprintf("%s || request.operation == 'DELETE' || (object.spec.schedulerName == %q && has(object.metadata.labels) && %q in object.metadata.labels && object.metadata.labels[%q] == 'true')",
				notPod, protocol.SchedulerName, protocol.CandidateLabel, protocol.CandidateLabel),
			Message: fmt.Sprintf("source %s may only create candidates: pods with schedulerName %s and label %s=true", inv.Spec.ClusterName, protocol.SchedulerName, protocol.CandidateLabel),
		},
	}
	if !inv.Spec.AllowPrivileged {
		validations = append(validations,
			admissionregistrationv1.Validation{
				Expression: notPod + " || request.operation != 'CREATE' || !((has(object.spec.hostNetwork) && object.spec.hostNetwork) || (has(object.spec.hostPID) && object.spec.hostPID) || (has(object.spec.hostIPC) && object.spec.hostIPC))",
				Message:    fmt.Sprintf("the invitation of source %s does not allow the host's network, PID or IPC namespaces", inv.Spec.ClusterName),
			},
			admissionregistrationv1.Validation{
				Expression: notPod + " || request.operation != 'CREATE' || !has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))",
				Message:    fmt.Sprintf("the invitation of source %s does not allow hostPath volumes", inv.Spec.ClusterName),
			},
			admissionregistrationv1.Validation{
				Expression: notPod + " || request.operation != 'CREATE' || [object.spec.containers, has(object.spec.initContainers) ? object.spec.initContainers : [], has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : []].all(cs, cs.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged))",
				Message:    fmt.Sprintf("the invitation of source %s does not allow privileged containers", inv.Spec.ClusterName),
			},
		)
	}
	validations = append(validations, inv.schedulingValidations()...)
	validations = append(validations, inv.priorityValidations()...)
	if !inv.Spec.AllowPrivileged {
		validations = append(validations, inv.baselineValidations()...)
	}
	validations = append(validations, inv.delegationValidations()...)
	validations = append(validations, inv.affinityValidations()...)
	validations = append(validations, inv.metadataValidations()...)
	validations = append(validations, inv.referenceValidations()...)
	validations = append(notToken(validations), inv.tokenValidations()...)
	// A stream (CONNECT) has no object to check but its options: the
	// checks above are about objects, and only the name is checked.
	for i := range validations {
		validations[i].Expression = "request.operation == 'CONNECT' || (" + validations[i].Expression + ")"
	}
	validations = append(validations, admissionregistrationv1.Validation{
		Expression: fmt.Sprintf("request.operation != 'CONNECT' || request.name.matches(%q)", candidateNamePattern),
		Message:    fmt.Sprintf("source %s may only open exec, attach and port-forward streams to its candidates", inv.Spec.ClusterName),
	})
	ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: inv.meta(""),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: ops,
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"},
							Resources: []string{"pods", "configmaps", "secrets"},
						},
					},
				}, {
					// The identity's requests for its own tokens.
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"},
							Resources: []string{"serviceaccounts/token"},
						},
					},
				}, {
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Connect},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"},
							Resources: streamSubresources,
						},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "invited-identity",
				Expression: "request.userInfo.username == " + strconv.Quote(inv.Username()),
			}},
			Validations: validations,
		},
	}
}

// PolicyBinding puts Policy in force, denying what it refuses.
func (inv Invitation) PolicyBinding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: inv.meta(""),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        inv.objectName(),
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:n-11] + "-" + hex.EncodeToString(sum[:])[:10]
}
