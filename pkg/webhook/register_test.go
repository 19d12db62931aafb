package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
