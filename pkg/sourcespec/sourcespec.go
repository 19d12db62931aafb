// Package sourcespec reads and writes what a source pod's candidates run.
//
// The webhook changes a handful of fields of a source pod's spec (its
// scheduler name and tolerations, see pkg/webhook) and saves those fields as
// they were in the original-fields annotation; every other field of the
// pod's spec is what the cluster's admission let in, and what its
// candidates run. The pod thus carries a few hundred bytes beyond the pod
// its author created, where a second copy of the whole spec (source-spec,
// which agents before original-fields wrote and which is still read) about
// doubled the bytes of every write and watch event of it.
package sourcespec

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Fields are the fields of a source pod's spec that the webhook changes,
// as they were before it (protocol.OriginalFieldsAnnotation).
type Fields struct {
	SchedulerName string              `json:"schedulerName,omitempty"`
	Tolerations   []corev1.Toleration `json:"tolerations,omitempty"`
}

// FieldsOf returns the fields of spec that the webhook changes.
func FieldsOf(spec *corev1.PodSpec) Fields {
	return Fields{SchedulerName: spec.SchedulerName, Tolerations: slices.Clone(spec.Tolerations)}
}

// Encode returns f as the annotation's value.
func (f Fields) Encode() (string, error) {
	raw, err := json.Marshal(f)
	if err != nil {
		return "", fmt.Errorf("encoding the original fields: %w", err)
	}
	return string(raw), nil
}

// Decode returns the fields an annotation's value holds.
func Decode(raw string) (Fields, error) {
	var f Fields
	if err := json.Unmarshal([]byte(raw), &f); err != nil {
		return Fields{}, err
	}
	return f, nil
}

// ApplyTo gives spec the fields of f.
func (f Fields) ApplyTo(spec *corev1.PodSpec) {
	spec.SchedulerName = f.SchedulerName
	spec.Tolerations = slices.Clone(f.Tolerations)
}

// Saved reports whether pod carries what its candidates run, in either
// form: a source pod the webhook admitted.
func Saved(pod *corev1.Pod) bool {
	return pod.Annotations[protocol.OriginalFieldsAnnotation] != "" || pod.Annotations[protocol.SourceSpecAnnotation] != ""
}

// Own is what a source pod with original fields runs of its own spec: its
// spec but for the original fields (which Original puts back), without
// the source's service-account token (WithoutServiceAccountToken), a node
// name (the virtual node is the agent's) or ephemeral containers (added to
// the running pod, by kubectl debug; a pod is never created with them). It
// shares the pod's slices, maps and pointers: the caller reads it and
// changes nothing of it.
func Own(pod *corev1.Pod) corev1.PodSpec {
	spec := WithoutServiceAccountToken(pod.Spec)
	spec.NodeName = ""
	spec.EphemeralContainers = nil
	return spec
}

// Original returns the spec that a source pod's candidates run, as the
// cluster's admission let it in up to the webhook, without the
// service-account token of the source (WithoutServiceAccountToken) and
// without a node name (the virtual node is the agent's). The caller may
// change it.
func Original(pod *corev1.Pod) (*corev1.PodSpec, error) {
	if raw, ok := pod.Annotations[protocol.OriginalFieldsAnnotation]; ok {
		f, err := decodedFields.get(raw)
		if err != nil {
			return nil, fmt.Errorf("original fields of the source pod are not valid: %w", err)
		}
		own := Own(pod)
		spec := own.DeepCopy()
		f.ApplyTo(spec)
		return spec, nil
	}
	// Pods admitted by agents before original-fields.
	raw, ok := pod.Annotations[protocol.SourceSpecAnnotation]
	if !ok || raw == "" {
		return nil, errors.New("source pod has neither original fields nor a saved spec; was it admitted by the Flotilla webhook?")
	}
	spec, err := decodedSpecs.get(raw)
	if err != nil {
		return nil, fmt.Errorf("saved spec of the source pod is not a valid pod spec: %w", err)
	}
	// Specs saved before the webhook dropped the token still carry it.
	*spec = WithoutServiceAccountToken(*spec)
	spec.NodeName = ""
	return spec, nil
}

// The pods of a workload carry one value of the annotation (one string,
// which the agent's cache shares between them), so a burst of them decodes
// it once instead of once a pod and a target.
var (
	decodedFields = decodeCache[Fields]{max: 128, copy: func(f *Fields) *Fields {
		return &Fields{SchedulerName: f.SchedulerName, Tolerations: slices.Clone(f.Tolerations)}
	}}
	decodedSpecs = decodeCache[corev1.PodSpec]{max: 128, copy: (*corev1.PodSpec).DeepCopy}
)

// decodeCache maps JSON values to their decoded value; it starts over when
// full, which only costs decoding again.
type decodeCache[T any] struct {
	mu   sync.Mutex
	m    map[string]*T
	max  int
	copy func(*T) *T
}

// get returns a copy of raw decoded, which the caller may change.
func (c *decodeCache[T]) get(raw string) (*T, error) {
	c.mu.Lock()
	v, ok := c.m[raw]
	c.mu.Unlock()
	if ok {
		return c.copy(v), nil
	}
	v = new(T)
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		c.m = nil
	}
	if c.m == nil {
		c.m = make(map[string]*T, c.max)
	}
	c.m[raw] = v
	c.mu.Unlock()
	return c.copy(v), nil
}

// serviceAccountVolumePrefix names the projected token volume that the
// ServiceAccount admission plugin adds; a token of the source cluster means
// nothing in a target.
const serviceAccountVolumePrefix = "kube-api-access-"

// WithoutServiceAccountToken returns spec without the projected
// service-account token volume that the source cluster's ServiceAccount
// admission added, and without its mounts: a token of the source cluster
// means nothing in a target. spec itself is not modified.
func WithoutServiceAccountToken(spec corev1.PodSpec) corev1.PodSpec {
	drop := map[string]bool{}
	var kept []corev1.Volume
	for _, v := range spec.Volumes {
		if strings.HasPrefix(v.Name, serviceAccountVolumePrefix) && v.Projected != nil {
			drop[v.Name] = true
			continue
		}
		kept = append(kept, v)
	}
	if len(drop) == 0 {
		return spec
	}
	strip := func(cs []corev1.Container) []corev1.Container {
		if cs == nil {
			return nil
		}
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			var mounts []corev1.VolumeMount
			for _, m := range c.VolumeMounts {
				if !drop[m.Name] {
					mounts = append(mounts, m)
				}
			}
			c.VolumeMounts = mounts
			out[i] = c
		}
		return out
	}
	spec.Volumes, spec.Containers, spec.InitContainers = kept, strip(spec.Containers), strip(spec.InitContainers)
	return spec
}
