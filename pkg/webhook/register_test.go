package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func TestKeepCABundles(t *testing.T) {
	const name = "pods.multicluster.flotilla.dev"
	hook := func(name, bundle string) admissionregistrationv1.MutatingWebhook {
		w := admissionregistrationv1.MutatingWebhook{Name: name}
		if bundle != "" {
			w.ClientConfig.CABundle = []byte(bundle)
		}
		return w
	}
	for _, tc := range []struct {
		name              string
		existing, desired []admissionregistrationv1.MutatingWebhook
		want              []admissionregistrationv1.MutatingWebhook
	}{{
		name:     "the injected bundle stays",
		existing: []admissionregistrationv1.MutatingWebhook{hook(name, "rotator CA")},
		desired:  []admissionregistrationv1.MutatingWebhook{hook(name, "")},
		want:     []admissionregistrationv1.MutatingWebhook{hook(name, "rotator CA")},
	}, {
		name:     "a replica's bundle does not replace the injected one",
		existing: []admissionregistrationv1.MutatingWebhook{hook(name, "rotator CA")},
		desired:  []admissionregistrationv1.MutatingWebhook{hook(name, "replica CA")},
		want:     []admissionregistrationv1.MutatingWebhook{hook(name, "rotator CA")},
	}, {
		name:     "nothing injected yet: empty until the rotator injects",
		existing: []admissionregistrationv1.MutatingWebhook{hook(name, "")},
		desired:  []admissionregistrationv1.MutatingWebhook{hook(name, "")},
		want:     []admissionregistrationv1.MutatingWebhook{hook(name, "")},
	}, {
		name:     "a webhook that was not there gets none",
		existing: []admissionregistrationv1.MutatingWebhook{hook("old.multicluster.flotilla.dev", "rotator CA")},
		desired:  []admissionregistrationv1.MutatingWebhook{hook(name, "")},
		want:     []admissionregistrationv1.MutatingWebhook{hook(name, "")},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := keepCABundles(tc.existing, tc.desired)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("webhooks (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfiguration(t *testing.T) {
	config := Registration{Name: "flotilla-agent", URL: "https://localhost:9443/mutate-pods", AgentNamespace: "flotilla-system"}.Configuration()
	if len(config.Webhooks) != 2 {
		t.Fatalf("%d webhooks, want pods and capacity", len(config.Webhooks))
	}
	pods, capacity := config.Webhooks[0], config.Webhooks[1]
	if pods.Name != PodsWebhookName || *pods.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("pods webhook %s, failure policy %s", pods.Name, *pods.FailurePolicy)
	}
	if capacity.Name != CapacityWebhookName || *capacity.FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("capacity webhook %s, failure policy %s: a split pod must not wait for the agent", capacity.Name, *capacity.FailurePolicy)
	}
	if *capacity.ClientConfig.URL != *pods.ClientConfig.URL {
		t.Errorf("the capacity webhook calls %s, not the mutator at %s", *capacity.ClientConfig.URL, *pods.ClientConfig.URL)
	}
	for _, w := range config.Webhooks {
		if *w.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun {
			t.Errorf("%s: side effects %s; the split holds places and records Events except on dry runs", w.Name, *w.SideEffects)
		}
	}

	namespace := func(name string, extra map[string]string) labels.Set {
		l := labels.Set{corev1.LabelMetadataName: name}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	nsSelector, err := metav1.LabelSelectorAsSelector(capacity.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns   labels.Set
		want bool
	}{
		{namespace("default", nil), true},
		{namespace("apps", map[string]string{protocol.NamespaceEnabledLabel: "true"}), true},
		{namespace("apps", map[string]string{protocol.CapacitySplitLabel: "false"}), false},
		{namespace("kube-system", nil), false},
		{namespace("flotilla-system", nil), false},
	} {
		if got := nsSelector.Matches(tc.ns); got != tc.want {
			t.Errorf("capacity webhook for namespace %v: %v, want %v", tc.ns, got, tc.want)
		}
	}
	podSelector, err := metav1.LabelSelectorAsSelector(capacity.ObjectSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pod  labels.Set
		want bool
	}{
		{labels.Set{protocol.CapacitySplitLabel: "true"}, true},
		{labels.Set{protocol.CapacitySplitLabel: "true", protocol.ElectLabel: "false"}, true},
		{labels.Set{protocol.CapacitySplitLabel: "true", protocol.ElectLabel: "true"}, false},
		{labels.Set{protocol.CapacitySplitLabel: "true", protocol.CandidateLabel: "true"}, false},
		{labels.Set{protocol.CapacitySplitLabel: "false"}, false},
		{labels.Set{}, false},
	} {
		if got := podSelector.Matches(tc.pod); got != tc.want {
			t.Errorf("capacity webhook for pod %v: %v, want %v", tc.pod, got, tc.want)
		}
	}
}
