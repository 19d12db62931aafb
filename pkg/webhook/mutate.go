// Package webhook owns the source-side admission of opted-in pods: it turns a
// pod labelled for multi-cluster scheduling into a source pod (its original
// spec saved once, no scheduler of the source will bind it, it tolerates the
// virtual-node taint), it gives the pods of a workload with an
// on-demand/spot split their place (pkg/split), and it serves and registers
// itself with one CA that the agent's replicas share through a Secret and
// cert-controller rotates, so no cert-manager is needed.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/local"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/split"
)

// Path is where the pod mutator is served, for both of its webhooks: the
// pods of multi-cluster scheduling and the pods of the single-cluster
// on-demand/spot split. Which one a pod came through is told by its
// labels, which the webhooks' object selectors match.
const Path = "/mutate-pods"

// Mutator is the admission handler for pod CREATE.
type Mutator struct {
	Decoder admission.Decoder
	// NotReadyTolerationSeconds is how long a source pod stays on a virtual
	// node whose target does not answer (NotReady) before it is evicted;
	// nil: forever.
	NotReadyTolerationSeconds *int64
	// Split gives the pods of a workload with an on-demand/spot split their
	// place; nil: no split.
	Split *split.Assigner
	// Local keeps an opted-in pod in this cluster, for its own scheduler,
	// when a self target with localFirst has room for it; nil: never.
	Local *local.Keeper
}

// Handle admits a pod, mutating it only when it opted in: a multi-cluster
// pod is split, then made a source pod, so that the spec saved for the
// targets carries its place; a pod opted in to the split alone is only
// split, and stays a pod for the cluster's own scheduler.
func (m *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	pod := &corev1.Pod{}
	if err := m.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding pod: %w", err))
	}
	if pod.Namespace == "" {
		// A pod created without one in its body is in the request's.
		pod.Namespace = req.Namespace
	}
	before := sourceFieldsOf(pod)
	split, made, kept, err := m.admit(ctx, pod, req.DryRun != nil && *req.DryRun)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if kept && !split {
		// Only the label that tells the pod stayed.
		return admission.Patched("", jsonpatch.NewOperation("add", "/metadata/labels/"+escapePointer(protocol.LocalLabel), "true"))
	}
	if !split && !made {
		return admission.Allowed("not opted in, or admitted already")
	}
	if !split {
		// Only MakeSource changed the pod, and it changes three fields:
		// their patch is written directly, without encoding the whole pod
		// and diffing it against the request (half of the webhook's CPU).
		return admission.Patched("", before.patch(pod)...)
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// sourceFields are the fields of a pod that MakeSource may change, as they
// were before it did.
type sourceFields struct {
	annotations   map[string]string
	schedulerName string
	tolerations   []corev1.Toleration
}

func sourceFieldsOf(pod *corev1.Pod) sourceFields {
	return sourceFields{
		annotations:   maps.Clone(pod.Annotations),
		schedulerName: pod.Spec.SchedulerName,
		tolerations:   slices.Clone(pod.Spec.Tolerations),
	}
}

// patch is the JSON patch (RFC 6902) from the fields before to those of
// pod. "add" of an object's member replaces it when it is there.
func (before sourceFields) patch(pod *corev1.Pod) []jsonpatch.Operation {
	var ops []jsonpatch.Operation
	switch {
	case maps.Equal(before.annotations, pod.Annotations):
	case before.annotations == nil:
		// Absent from the request's pod (nil is omitted, an empty map is
		// not): added whole.
		ops = append(ops, jsonpatch.NewOperation("add", "/metadata/annotations", pod.Annotations))
	default:
		for k, v := range pod.Annotations {
			if old, ok := before.annotations[k]; !ok || old != v {
				ops = append(ops, jsonpatch.NewOperation("add", "/metadata/annotations/"+escapePointer(k), v))
			}
		}
		for k := range before.annotations {
			if _, ok := pod.Annotations[k]; !ok {
				ops = append(ops, jsonpatch.NewOperation("remove", "/metadata/annotations/"+escapePointer(k), nil))
			}
		}
	}
	if before.schedulerName != pod.Spec.SchedulerName {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/schedulerName", pod.Spec.SchedulerName))
	}
	if !equality.Semantic.DeepEqual(before.tolerations, pod.Spec.Tolerations) {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/tolerations", pod.Spec.Tolerations))
	}
	return ops
}

// escapePointer escapes a key as a JSON pointer's reference token (RFC 6901).
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// admit mutates pod as Handle does and reports whether the split changed
// it, whether making it a source pod did, and whether it stays in this
// cluster (labelled so) instead.
func (m *Mutator) admit(ctx context.Context, pod *corev1.Pod, dryRun bool) (split, made, kept bool, err error) {
	multiCluster := OptedIn(pod)
	if !multiCluster && !SplitOptedIn(pod) {
		return false, false, false, nil
	}
	split = m.split(ctx, pod, dryRun)
	if !multiCluster {
		return split, false, false, nil
	}
	// After the split: the place it gave the pod is where it must fit.
	if kept = m.keep(ctx, pod, dryRun); kept {
		return split, false, true, nil
	}
	if made, err = MakeSource(pod, m.NotReadyTolerationSeconds); err != nil {
		return false, false, false, err
	}
	return split, made, false, nil
}

// keep reports whether an opted-in pod stays in this cluster, and labels it
// so. A pod admitted before (a reinvocation) is not judged again: a source
// pod stays one, a kept pod stays kept. A failure to decide sends the pod
// through the targets, as without localFirst.
func (m *Mutator) keep(ctx context.Context, pod *corev1.Pod, dryRun bool) bool {
	if pod.Labels[protocol.LocalLabel] == "true" {
		return true
	}
	if m.Local == nil || pod.Annotations[protocol.SourceSpecAnnotation] != "" {
		return false
	}
	verdict, err := m.Local.Keep(ctx, pod, dryRun)
	if err != nil {
		logf.FromContext(ctx).Error(err, "Deciding whether a pod stays in this cluster; it goes through the targets", "namespace", pod.Namespace, "generateName", pod.GenerateName, "name", pod.Name)
		return false
	}
	if !verdict.Fits {
		logf.FromContext(ctx).V(4).Info("Pod goes through the targets", "namespace", pod.Namespace, "generateName", pod.GenerateName, "name", pod.Name, "reason", verdict.Reason)
		return false
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[protocol.LocalLabel] = "true"
	return true
}

// split gives pod its place in its workload's on-demand/spot split, if it
// has one. A failure to read the cache admits the pod without a place: a
// pod refused would only be retried by its controller, and the rebalancer
// replaces a pod without a place once the workload is available.
func (m *Mutator) split(ctx context.Context, pod *corev1.Pod, dryRun bool) bool {
	if m.Split == nil {
		return false
	}
	changed, err := m.Split.Assign(ctx, pod, dryRun)
	if err != nil {
		logf.FromContext(ctx).Error(err, "Admitting a pod without its place in the on-demand/spot split", "namespace", pod.Namespace, "generateName", pod.GenerateName, "name", pod.Name)
		return false
	}
	return changed
}

// SplitOptedIn reports whether a pod that is not multi-cluster asked for
// the on-demand/spot split; the namespace's opt-out is checked by the
// webhook's namespaceSelector. A candidate is split in its source, if at
// all, never again in its target.
func SplitOptedIn(pod *corev1.Pod) bool {
	return pod.Labels[protocol.CapacitySplitLabel] == "true" && pod.Labels[protocol.CandidateLabel] == ""
}

// OptedIn reports whether a pod asked for multi-cluster scheduling. The
// namespace's opt-in is checked by the webhook's namespaceSelector. A
// candidate is never a source pod, whatever its labels say.
func OptedIn(pod *corev1.Pod) bool {
	return pod.Labels[protocol.ElectLabel] == "true" && pod.Labels[protocol.CandidateLabel] == ""
}

// MakeSource turns an opted-in pod into a source pod. It is idempotent: on
// reinvocation the saved spec is kept as it was first saved. notReadySeconds
// is how long the pod tolerates a virtual node that is NotReady, its target
// not answering (nil: forever).
func MakeSource(pod *corev1.Pod, notReadySeconds *int64) (bool, error) {
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
	// A virtual node is unreachable (its Lease not renewed) when the agent
	// is away, which says nothing about the pod running in its target: the
	// pod is never evicted for it. It is NotReady when the target's API
	// does not answer the agent: the pod is evicted after notReadySeconds,
	// so its controller recreates it elsewhere. The taint manager applies
	// the shortest matching toleration, so the defaults that admission adds
	// give way; a toleration the pod's author wrote stays.
	if setNoExecuteToleration(pod, corev1.TaintNodeUnreachable, nil) {
		changed = true
	}
	if setNoExecuteToleration(pod, corev1.TaintNodeNotReady, notReadySeconds) {
		changed = true
	}
	return changed, nil
}

// defaultTolerationSeconds is what the DefaultTolerationSeconds admission
// plugin gives a pod that does not tolerate not-ready or unreachable nodes.
const defaultTolerationSeconds = 300

// setNoExecuteToleration makes the pod tolerate the NoExecute taint key for
// seconds (nil: forever), replacing the tolerations of key that admission
// added by default; when the pod's author wrote one of their own, it stays.
func setNoExecuteToleration(pod *corev1.Pod, key string, seconds *int64) (changed bool) {
	want := corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}
	var kept []corev1.Toleration
	found := false
	for _, t := range pod.Spec.Tolerations {
		if t.Key == key && t.Effect == corev1.TaintEffectNoExecute {
			switch {
			case t.MatchToleration(&want) && ptr.Equal(t.TolerationSeconds, seconds):
				found = true
			case t.TolerationSeconds != nil && *t.TolerationSeconds == defaultTolerationSeconds:
				changed = true
				continue // admission's default
			default:
				found = true // the author's
			}
		}
		kept = append(kept, t)
	}
	if !found {
		kept = append(kept, want)
		changed = true
	}
	pod.Spec.Tolerations = kept
	return changed
}

func toleratesVirtualNodes(ts []corev1.Toleration) bool {
	for _, t := range ts {
		if t.Key == protocol.VirtualNodeTaintKey && (t.Operator == corev1.TolerationOpExists || t.Value == protocol.VirtualNodeTaintValue) {
			return true
		}
	}
	return false
}
