package webhook

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Registration says how the API server reaches the webhook: a URL (an agent
// outside the cluster, as in the sandbox) or a Service.
type Registration struct {
	// Name of the MutatingWebhookConfiguration.
	Name string
	// URL, when set, is the webhook's full URL.
	URL string
	// ServiceNamespace, ServiceName and ServicePort, when URL is empty.
	ServiceNamespace, ServiceName string
	ServicePort                   int32
	CABundle                      []byte
}

// Configuration is the MutatingWebhookConfiguration that sends opted-in pods
// of opted-in namespaces to the agent.
func (r Registration) Configuration() *admissionregistrationv1.MutatingWebhookConfiguration {
	client := admissionregistrationv1.WebhookClientConfig{CABundle: r.CABundle}
	if r.URL != "" {
		client.URL = ptr.To(r.URL)
	} else {
		client.Service = &admissionregistrationv1.ServiceReference{
			Namespace: r.ServiceNamespace, Name: r.ServiceName, Path: ptr.To(Path), Port: ptr.To(r.ServicePort),
		}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Labels: map[string]string{"app.kubernetes.io/name": "flotilla"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "pods.multicluster.flotilla.dev",
			ClientConfig: client,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{protocol.NamespaceEnabledLabel: "true"}},
			ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{protocol.ElectLabel: "true"}},
			// An opted-in pod admitted without the webhook would run in the
			// source like any other pod, against its owner's intent.
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
}

// Apply creates or updates the configuration.
func (r Registration) Apply(ctx context.Context, client kubernetes.Interface) error {
	want := r.Configuration()
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating MutatingWebhookConfiguration %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", want.Name, err)
	}
	got.Webhooks = want.Webhooks
	got.Labels = want.Labels
	if _, err := api.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating MutatingWebhookConfiguration %s: %w", want.Name, err)
	}
	return nil
}
