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

	"github.com/flotilla-dev/flotilla/pkg/local"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
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
	// KeepManagedFields keeps a source pod's managedFields. Without it the
	// webhook drops them when it makes a source pod: the API server tracks
	// a pod's managers only while it has some, so the writes that follow
	// (its election, its binding, its mirrored status) skip that
	// bookkeeping, and the pod is smaller in every watch. A pod kept in
	// this cluster, or not made a source pod, keeps them.
	KeepManagedFields bool
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
// split, and stays a pod for the cluster's own scheduler. Whatever it
// does, it first takes off every key that Flotilla alone writes
// (protocol.WrittenByFlotilla) but those it judges itself, the saved spec
// and the local mark: a pod's author cannot hand the targets a spec of
// their own, an election or a candidate's labels.
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
	split, err := m.admit(ctx, pod, req.DryRun != nil && *req.DryRun)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if !split {
		// Only the fields of sourceFields changed: their patch is written
		// directly, without encoding the whole pod and diffing it against
		// the request (half of the webhook's CPU).
		ops := before.patch(pod)
		if len(ops) == 0 {
			return admission.Allowed("not opted in, or admitted already")
		}
		return admission.Patched("", ops...)
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// sourceFields are the fields of a pod that the webhook changes but for
// the split, as they were before it did.
type sourceFields struct {
	labels        map[string]string
	annotations   map[string]string
	schedulerName string
	tolerations   []corev1.Toleration
	managed       bool
}

func sourceFieldsOf(pod *corev1.Pod) sourceFields {
	return sourceFields{
		labels:        maps.Clone(pod.Labels),
		annotations:   maps.Clone(pod.Annotations),
		schedulerName: pod.Spec.SchedulerName,
		tolerations:   slices.Clone(pod.Spec.Tolerations),
		managed:       len(pod.ManagedFields) > 0,
	}
}

// patch is the JSON patch (RFC 6902) from the fields before to those of
// pod. "add" of an object's member replaces it when it is there.
func (before sourceFields) patch(pod *corev1.Pod) []jsonpatch.Operation {
	ops := patchMap(nil, "/metadata/labels", before.labels, pod.Labels)
	ops = patchMap(ops, "/metadata/annotations", before.annotations, pod.Annotations)
	if before.schedulerName != pod.Spec.SchedulerName {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/schedulerName", pod.Spec.SchedulerName))
	}
	if !equality.Semantic.DeepEqual(before.tolerations, pod.Spec.Tolerations) {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/tolerations", pod.Spec.Tolerations))
	}
	if before.managed && len(pod.ManagedFields) == 0 {
		ops = append(ops, jsonpatch.NewOperation("remove", "/metadata/managedFields", nil))
	}
	return ops
}

// patchMap appends to ops the operations that turn the map at path from
// before into after.
func patchMap(ops []jsonpatch.Operation, path string, before, after map[string]string) []jsonpatch.Operation {
	switch {
	case maps.Equal(before, after):
	case before == nil:
		// Absent from the request's pod (nil is omitted, an empty map is
		// not): added whole.
		ops = append(ops, jsonpatch.NewOperation("add", path, after))
	default:
		for _, k := range slices.Sorted(maps.Keys(after)) {
			if old, ok := before[k]; !ok || old != after[k] {
				ops = append(ops, jsonpatch.NewOperation("add", path+"/"+escapePointer(k), after[k]))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(before)) {
			if _, ok := after[k]; !ok {
				ops = append(ops, jsonpatch.NewOperation("remove", path+"/"+escapePointer(k), nil))
			}
		}
	}
	return ops
}

// escapePointer escapes a key as a JSON pointer's reference token (RFC 6901).
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// admit mutates pod as Handle does and reports whether the split changed
// it.
func (m *Mutator) admit(ctx context.Context, pod *corev1.Pod, dryRun bool) (split bool, err error) {
	stripFlotillaKeys(pod)
	multiCluster := OptedIn(pod)
	if !multiCluster {
		// Neither a source pod nor kept here by the webhook's verdict: it
		// carries neither mark.
		delete(pod.Labels, protocol.LocalLabel)
		delete(pod.Annotations, protocol.OriginalFieldsAnnotation)
		if !SplitOptedIn(pod) {
			return false, nil
		}
		return m.split(ctx, pod, dryRun), nil
	}
	split = m.split(ctx, pod, dryRun)
	// After the split: the place it gave the pod is where it must fit.
	if m.keep(ctx, pod, dryRun) {
		delete(pod.Annotations, protocol.OriginalFieldsAnnotation)
		return split, nil
	}
	delete(pod.Labels, protocol.LocalLabel)
	if _, err = MakeSource(pod, m.NotReadyTolerationSeconds); err != nil {
		return false, err
	}
	if !m.KeepManagedFields {
		pod.ManagedFields = nil
	}
	return split, nil
}

// stripFlotillaKeys takes off the pod every label and annotation that
// Flotilla alone writes, but the original fields and the local mark, which
// the webhook judges itself (MakeSource, keep): an earlier invocation of
// the webhook for this request may have written them. The saved spec of
// agents before original-fields goes: no pod is admitted with it any more.
func stripFlotillaKeys(pod *corev1.Pod) {
	for k := range pod.Labels {
		if protocol.WrittenByFlotilla(k) && k != protocol.LocalLabel {
			delete(pod.Labels, k)
		}
	}
	for k := range pod.Annotations {
		if protocol.WrittenByFlotilla(k) && k != protocol.OriginalFieldsAnnotation {
			delete(pod.Annotations, k)
		}
	}
}

// keep reports whether an opted-in pod stays in this cluster, and labels it
// so. A source pod admitted before (a reinvocation: its original fields are
// those MakeSource saved, see originalFieldsFit) stays one. Any other pod is
// judged, the local mark it came with or not: the mark is the webhook's
// verdict, never its author's, so a pod that an earlier invocation kept is
// judged again, holding room once more until the view sees it (a
// reinvocation comes only after another webhook changed the pod). A failure
// to decide sends the pod through the targets, as without localFirst.
func (m *Mutator) keep(ctx context.Context, pod *corev1.Pod, dryRun bool) bool {
	if raw := pod.Annotations[protocol.OriginalFieldsAnnotation]; raw != "" && originalFieldsFit(raw, pod.Spec, m.NotReadyTolerationSeconds) {
		return false
	}
	if m.Local == nil {
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
// reinvocation the original fields are kept as they were first saved.
// notReadySeconds is how long the pod tolerates a virtual node that is
// NotReady, its target not answering (nil: forever).
//
// The pod's candidates run its spec with the fields MakeSource changes as
// they were before (sourcespec.Original), so the original fields saved are
// the pod's own as admitted: fields the pod came with are kept only when
// making a source pod of them gives the pod's spec (see originalFieldsFit),
// as those an earlier invocation of the webhook saved do; any others are
// replaced.
func MakeSource(pod *corev1.Pod, notReadySeconds *int64) (bool, error) {
	changed := false
	raw, err := originalFieldsFor(pod, notReadySeconds)
	if err != nil {
		return false, err
	}
	if old, ok := pod.Annotations[protocol.OriginalFieldsAnnotation]; !ok || old != raw {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[protocol.OriginalFieldsAnnotation] = raw
		changed = true
	}
	if prepareSpec(&pod.Spec, notReadySeconds) {
		changed = true
	}
	return changed, nil
}

// originalFieldsFor is the original fields to save for a pod being made a
// source pod: those it carries when they fit its spec, else its own and, on
// a pod that already looks like a source pod, without the tolerations
// MakeSource gives it.
func originalFieldsFor(pod *corev1.Pod, notReadySeconds *int64) (string, error) {
	if raw, ok := pod.Annotations[protocol.OriginalFieldsAnnotation]; ok && originalFieldsFit(raw, pod.Spec, notReadySeconds) {
		return raw, nil
	}
	f := sourcespec.FieldsOf(&pod.Spec)
	if f.SchedulerName == protocol.SourceSchedulerName {
		f.Tolerations = withoutSourceTolerations(f.Tolerations, notReadySeconds)
	}
	return f.Encode()
}

// originalFieldsFit reports whether raw holds fields that MakeSource would
// have saved for a pod whose spec is now visible: the visible spec with
// them, prepared as MakeSource prepares a source pod, is the visible spec.
// Its candidates then run what the cluster's admission let in, but where a
// candidate is given its own values (scheduler name, the virtual node's and
// the NoExecute tolerations).
func originalFieldsFit(raw string, visible corev1.PodSpec, notReadySeconds *int64) bool {
	f, err := sourcespec.Decode(raw)
	if err != nil {
		return false
	}
	spec := visible
	f.ApplyTo(&spec)
	prepareSpec(&spec, notReadySeconds)
	return spec.SchedulerName == visible.SchedulerName && equality.Semantic.DeepEqual(sortedTolerations(spec.Tolerations), sortedTolerations(visible.Tolerations))
}

// sortedTolerations is ts in one order: their order means nothing, and
// prepareSpec appends the ones it adds after those another webhook may have
// added.
func sortedTolerations(ts []corev1.Toleration) []corev1.Toleration {
	return slices.SortedFunc(slices.Values(ts), func(a, b corev1.Toleration) int {
		return strings.Compare(a.String(), b.String())
	})
}

// prepareSpec makes spec the spec of a source pod and reports whether it
// changed it.
func prepareSpec(spec *corev1.PodSpec, notReadySeconds *int64) bool {
	changed := false
	if spec.SchedulerName != protocol.SourceSchedulerName {
		// No scheduler serves this name: the agent binds the pod to a
		// virtual node once a target has bound its candidate.
		spec.SchedulerName = protocol.SourceSchedulerName
		changed = true
	}
	if !toleratesVirtualNodes(spec.Tolerations) {
		spec.Tolerations = append(spec.Tolerations, virtualNodeToleration)
		changed = true
	}
	// A virtual node is unreachable (its Lease not renewed) when the agent
	// is away, which says nothing about the pod running in its target: the
	// pod is never evicted for it. It is NotReady when the target's API
	// does not answer the agent: the pod is evicted after notReadySeconds,
	// so its controller recreates it elsewhere. The taint manager applies
	// the shortest matching toleration, so the defaults that admission adds
	// give way; a toleration the pod's author wrote stays.
	if setNoExecuteToleration(spec, corev1.TaintNodeUnreachable, nil) {
		changed = true
	}
	if setNoExecuteToleration(spec, corev1.TaintNodeNotReady, notReadySeconds) {
		changed = true
	}
	return changed
}

// virtualNodeToleration is the toleration of the virtual nodes' taint that
// a source pod is given.
var virtualNodeToleration = corev1.Toleration{
	Key:      protocol.VirtualNodeTaintKey,
	Operator: corev1.TolerationOpEqual,
	Value:    protocol.VirtualNodeTaintValue,
	Effect:   corev1.TaintEffectNoSchedule,
}

// withoutSourceTolerations is ts without the tolerations prepareSpec
// gives a source pod: the target's admission gives a candidate its own
// defaults instead.
func withoutSourceTolerations(ts []corev1.Toleration, notReadySeconds *int64) []corev1.Toleration {
	var kept []corev1.Toleration
	for _, t := range ts {
		switch {
		case t.MatchToleration(&virtualNodeToleration):
		case t.Key == corev1.TaintNodeUnreachable && t.Operator == corev1.TolerationOpExists && t.Effect == corev1.TaintEffectNoExecute && t.TolerationSeconds == nil:
		case t.Key == corev1.TaintNodeNotReady && t.Operator == corev1.TolerationOpExists && t.Effect == corev1.TaintEffectNoExecute && ptr.Equal(t.TolerationSeconds, notReadySeconds):
		default:
			kept = append(kept, t)
		}
	}
	return kept
}

// defaultTolerationSeconds is what the DefaultTolerationSeconds admission
// plugin gives a pod that does not tolerate not-ready or unreachable nodes.
const defaultTolerationSeconds = 300

// setNoExecuteToleration makes the pod tolerate the NoExecute taint key for
// seconds (nil: forever), replacing the tolerations of key that admission
// added by default; when the pod's author wrote one of their own, it stays.
func setNoExecuteToleration(spec *corev1.PodSpec, key string, seconds *int64) (changed bool) {
	want := corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}
	var kept []corev1.Toleration
	found := false
	for _, t := range spec.Tolerations {
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
	spec.Tolerations = kept
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
