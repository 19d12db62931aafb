package webhook

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// FieldManager names the agent's server-side applies.
const FieldManager = "flotilla-agent"

// SourcePodPolicyMessage is what the API server answers to an update that
// takes the opt-in label off a source pod.
var SourcePodPolicyMessage = fmt.Sprintf("label %s=true cannot be removed or changed on a source pod: "+
	"Flotilla would take the pod for gone and delete its delegate in the target that runs it; delete the pod instead", protocol.ElectLabel)

// sourcePodExpression is true when a source pod (a pod the webhook admitted,
// which carries the saved spec) keeps its opt-in label.
var sourcePodExpression = fmt.Sprintf("has(object.metadata.labels) && object.metadata.labels[?%q].orValue('') == 'true'", protocol.ElectLabel)

// SourcePodPolicy is the ValidatingAdmissionPolicy (and its binding) that
// keeps the opt-in label on source pods. The agent caches opted-in pods by
// that label; a source pod that lost it would look deleted, and its
// candidates and delegate would be deleted with it while it runs on.
func SourcePodPolicy(name string) (*admissionv1ac.ValidatingAdmissionPolicyApplyConfiguration, *admissionv1ac.ValidatingAdmissionPolicyBindingApplyConfiguration) {
	labels := map[string]string{"app.kubernetes.io/name": "flotilla"}
	policy := admissionv1ac.ValidatingAdmissionPolicy(name).
		WithLabels(labels).
		WithSpec(admissionv1ac.ValidatingAdmissionPolicySpec().
			WithFailurePolicy(admissionregistrationv1.Fail).
			WithMatchConstraints(admissionv1ac.MatchResources().
				WithNamespaceSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{protocol.NamespaceEnabledLabel: "true"})).
				// For an update, the selector matches when the old or the
				// new object has the label.
				WithObjectSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{protocol.ElectLabel: "true"})).
				WithResourceRules(admissionv1ac.NamedRuleWithOperations().
					WithOperations(admissionregistrationv1.Update).
					WithAPIGroups("").WithAPIVersions("v1").WithResources("pods", "pods/status"))).
			WithMatchConditions(admissionv1ac.MatchCondition().
				WithName("source-pod").
				WithExpression(fmt.Sprintf("has(oldObject.metadata.annotations) && %q in oldObject.metadata.annotations", protocol.SourceSpecAnnotation))).
			WithValidations(admissionv1ac.Validation().
				WithExpression(sourcePodExpression).
				WithMessage(SourcePodPolicyMessage).
				WithReason(metav1.StatusReasonInvalid)))
	binding := admissionv1ac.ValidatingAdmissionPolicyBinding(name).
		WithLabels(labels).
		WithSpec(admissionv1ac.ValidatingAdmissionPolicyBindingSpec().
			WithPolicyName(name).
			WithValidationActions(admissionregistrationv1.Deny))
	return policy, binding
}

// ApplySourcePodPolicy creates or updates the policy and its binding.
func ApplySourcePodPolicy(ctx context.Context, client kubernetes.Interface, name string) error {
	policy, binding := SourcePodPolicy(name)
	api := client.AdmissionregistrationV1()
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	if _, err := api.ValidatingAdmissionPolicies().Apply(ctx, policy, opts); err != nil {
		return fmt.Errorf("applying ValidatingAdmissionPolicy %s: %w", name, err)
	}
	if _, err := api.ValidatingAdmissionPolicyBindings().Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("applying ValidatingAdmissionPolicyBinding %s: %w", name, err)
	}
	return nil
}
