package webhook

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Registration says how the API server reaches the webhook: a URL (an agent
// outside the cluster, as in the sandbox) or a Service. It carries no CA
// bundle: the certificate rotator injects the CA of the shared Secret, and
// Apply keeps what it injected.
type Registration struct {
	// Name of the MutatingWebhookConfiguration.
	Name string
	// URL, when set, is the webhook's full URL.
	URL string
	// ServiceNamespace, ServiceName and ServicePort, when URL is empty.
	ServiceNamespace, ServiceName string
	ServicePort                   int32
	// AgentNamespace is the agent's own namespace: its pods, and those of
	// kube-system, are never split, so the split never stands between the
	// cluster and the pods that run it.
	AgentNamespace string
}

// Names of the webhooks of the configuration.
const (
	PodsWebhookName     = "pods.multicluster.flotilla.dev"
	CapacityWebhookName = "capacity.multicluster.flotilla.dev"
)

// Configuration is the MutatingWebhookConfiguration that sends opted-in pods
// of opted-in namespaces to the agent (PodsWebhookName), and the pods
// opted in to the on-demand/spot split alone, in any namespace that did not
// opt out (CapacityWebhookName). Both reach the one Path.
func (r Registration) Configuration() *admissionregistrationv1.MutatingWebhookConfiguration {
	client := admissionregistrationv1.WebhookClientConfig{}
	if r.URL != "" {
		client.URL = ptr.To(r.URL)
	} else {
		client.Service = &admissionregistrationv1.ServiceReference{
			Namespace: r.ServiceNamespace, Name: r.ServiceName, Path: ptr.To(Path), Port: ptr.To(r.ServicePort),
		}
	}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
			Scope: ptr.To(admissionregistrationv1.NamespacedScope),
		},
	}}
	excluded := []string{"kube-system"}
	if r.AgentNamespace != "" && r.AgentNamespace != "kube-system" {
		excluded = append(excluded, r.AgentNamespace)
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Labels: map[string]string{"app.kubernetes.io/name": "flotilla"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:              PodsWebhookName,
			ClientConfig:      client,
			Rules:             rules,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{protocol.NamespaceEnabledLabel: "true"}},
			ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{protocol.ElectLabel: "true"}},
			// An opted-in pod admitted without the webhook would run in the
			// source like any other pod, against its owner's intent.
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:   ptr.To(admissionregistrationv1.Equivalent),
			// The split holds a pod's place in memory and tells a
			// workload's owner of a bad annotation; on a dry run it does
			// neither.
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](10),
		}, {
			Name:         CapacityWebhookName,
			ClientConfig: client,
			Rules:        rules,
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: protocol.CapacitySplitLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"}},
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: excluded},
			}},
			// A multi-cluster pod is split by the webhook above, where its
			// namespace opted in; a candidate was split in its source.
			ObjectSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{protocol.CapacitySplitLabel: "true"},
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: protocol.ElectLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}},
					{Key: protocol.CandidateLabel, Operator: metav1.LabelSelectorOpDoesNotExist},
				},
			},
			// A pod admitted while the agent is away runs without a place;
			// the rebalancer replaces it once the agent is back. Refusing
			// it would stop the workload's pods for the agent's sake.
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
}

// Apply creates or updates the configuration, keeping the caBundle the
// rotator injected. Replicas and the rotator write the same object, so a
// conflict is retried on what is there now.
func (r Registration) Apply(ctx context.Context, client kubernetes.Interface) error {
	want := r.Configuration()
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	retriable := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err := retry.OnError(retry.DefaultRetry, retriable, func() error {
		got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, want, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		webhooks := keepCABundles(got.Webhooks, want.Webhooks)
		if equality.Semantic.DeepEqual(got.Webhooks, webhooks) && equality.Semantic.DeepEqual(got.Labels, want.Labels) {
			return nil
		}
		got.Webhooks = webhooks
		got.Labels = want.Labels
		_, err = api.Update(ctx, got, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("applying MutatingWebhookConfiguration %s: %w", want.Name, err)
	}
	return nil
}

// keepCABundles returns the desired webhooks, each with the caBundle the
// existing webhook of the same name has: the bundle belongs to the rotator,
// and a replica that wrote an empty one would make the API server distrust
// every replica until the rotator noticed.
func keepCABundles(existing, desired []admissionregistrationv1.MutatingWebhook) []admissionregistrationv1.MutatingWebhook {
	bundles := map[string][]byte{}
	for _, w := range existing {
		bundles[w.Name] = w.ClientConfig.CABundle
	}
	out := make([]admissionregistrationv1.MutatingWebhook, len(desired))
	for i, w := range desired {
		w.ClientConfig.CABundle = bundles[w.Name]
		out[i] = w
	}
	return out
}
