// Package webhook owns the source-side admission of opted-in pods: it turns a
// pod labelled for multi-cluster scheduling into a source pod (its original
// spec saved once, no scheduler of the source will bind it, it tolerates the
// virtual-node taint), and it serves and registers itself with one CA that
// the agent's replicas share through a Secret and cert-controller rotates,
// so no cert-manager is needed.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Path is where the pod mutator is served.
const Path = "/mutate-pods"

// Mutator is the admission handler for pod CREATE.
type Mutator struct {
	Decoder admission.Decoder
}

// Handle admits a pod, mutating it only when it opted in.
func (m *Mutator) Handle(_ context.Context, req admission.Request) admission.Response {
	pod := &corev1.Pod{}
	if err := m.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding pod: %w", err))
	}
	if !OptedIn(pod) {
		return admission.Allowed("not opted in to multi-cluster scheduling")
	}
	changed, err := MakeSource(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if !changed {
		return admission.Allowed("already a source pod")
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// OptedIn reports whether a pod asked for multi-cluster scheduling. The
// namespace's opt-in is checked by the webhook's namespaceSelector. A
// candidate is never a source pod, whatever its labels say.
func OptedIn(pod *corev1.Pod) bool {
	return pod.Labels[protocol.ElectLabel] == "true" && pod.Labels[protocol.CandidateLabel] == ""
}

// MakeSource turns an opted-in pod into a source pod. It is idempotent: on
// reinvocation the saved spec is kept as it was first saved.
func MakeSource(pod *corev1.Pod) (bool, error) {
	changed := false
	if _, saved := pod.Annotations[protocol.SourceSpecAnnotation]; !saved {
		// The source's service-account token is no part of what runs in a
		// target, and a third of the saved spec of a simple pod.
		raw, err := json.Marshal(candidate.WithoutServiceAccountToken(pod.Spec))
		if err != nil {
			return false, fmt.Errorf("saving the original spec: %w", err)
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[protocol.SourceSpecAnnotation] = string(raw)
		changed = true
	}
	if pod.Spec.SchedulerName != protocol.SourceSchedulerName {
		// No scheduler serves this name: the agent binds the pod to a
		// virtual node once a target has bound its candidate.
		pod.Spec.SchedulerName = protocol.SourceSchedulerName
		changed = true
	}
	if !toleratesVirtualNodes(pod.Spec.Tolerations) {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
			Key:      protocol.VirtualNodeTaintKey,
			Operator: corev1.TolerationOpEqual,
			Value:    protocol.VirtualNodeTaintValue,
			Effect:   corev1.TaintEffectNoSchedule,
		})
		changed = true
	}
	// A virtual node goes NotReady or unreachable when the agent is away,
	// which says nothing about the pod running in its target: the pod must
	// not be evicted for it. The taint manager applies the shortest matching
	// toleration, so the 300s defaults added by admission must go.
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		if !toleratesForever(pod.Spec.Tolerations, key) {
			var kept []corev1.Toleration
			for _, t := range pod.Spec.Tolerations {
				if t.Key != key || t.Effect != corev1.TaintEffectNoExecute {
					kept = append(kept, t)
				}
			}
			pod.Spec.Tolerations = append(kept, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
			changed = true
		}
	}
	return changed, nil
}

// toleratesForever reports whether the only NoExecute tolerations of key
// tolerate it without a time limit.
func toleratesForever(ts []corev1.Toleration, key string) bool {
	found := false
	for _, t := range ts {
		if t.Key != key || t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if t.TolerationSeconds != nil {
			return false
		}
		found = true
	}
	return found
}

func toleratesVirtualNodes(ts []corev1.Toleration) bool {
	for _, t := range ts {
		if t.Key == protocol.VirtualNodeTaintKey && (t.Operator == corev1.TolerationOpExists || t.Value == protocol.VirtualNodeTaintValue) {
			return true
		}
	}
	return false
}
