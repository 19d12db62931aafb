package slim

import (
	"crypto/sha256"
	"encoding/json"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// A decoded pod carries its own copy of every string, though most repeat
// from pod to pod: every label and annotation key, namespaces, target
// names, images, condition types, and the saved spec of pods admitted
// before original-fields, identical for the pods of one workload. Cached
// for thousands of pods, the copies are a sixth of the agent's heap. The
// transforms replace them with one shared copy from a pool; the specs that
// source pods keep are shared likewise (specPool).
//
// Go's unique package interns too, but keeps a value only while a Handle to
// it lives; the cached pods hold strings, not Handles, so each collection
// would start the sharing over.

// maxPooled bounds the pool. Values that do not repeat (an annotation with
// a timestamp, say) would otherwise grow it forever; when full, the pool
// starts over: strings already shared stay shared.
const maxPooled = 1 << 14

// unique are the protocol's labels and annotations whose values differ
// from pod to pod: pooling them would only fill the pool.
var unique = map[string]bool{
	protocol.SourceUIDLabel:       true,
	protocol.ElectionAnnotation:   true,
	protocol.StateAnnotation:      true,
	protocol.AllowedAnnotation:    true,
	protocol.DeniedAnnotation:     true,
	protocol.SourceNameAnnotation: true,
}

type pool struct {
	mu      sync.Mutex
	max     int
	strings map[string]string
}

var shared = &pool{max: maxPooled, strings: map[string]string{}}

// Intern returns the shared copy of s, for other caches of the agent whose
// strings repeat from object to object.
func Intern(s string) string { return shared.intern(s) }

// intern returns the pool's copy of s, adding s when it has none.
func (p *pool) intern(s string) string {
	if s == "" {
		return s
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.strings[s]; ok {
		return c
	}
	if len(p.strings) >= p.max {
		clear(p.strings)
	}
	p.strings[s] = s
	return s
}

// internMap returns m with pooled keys, and pooled values but for the keys
// in unique. It makes a new map: the keys of a map cannot be replaced in
// place.
func (p *pool) internMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !unique[k] {
			v = p.intern(v)
		}
		out[p.intern(k)] = v
	}
	return out
}

// specPool shares the specs that cached source pods keep, one for the
// pods of a workload, as pool shares strings: keyed by the SHA-256 of their
// JSON without the node name (the one field of the spec that differs
// between a Deployment's or a Job's pods once admitted, but the token
// volume's name, which the cache drops; a StatefulSet's pods differ in
// their hostname too, and keep one each), starting over when full.
type specPool struct {
	mu    sync.Mutex
	max   int
	specs map[[sha256.Size]byte]corev1.PodSpec
}

// maxSpecs bounds the spec pool: about as many workloads' pods in flight
// at once.
const maxSpecs = 1 << 10

var sharedSpecs = &specPool{max: maxSpecs, specs: map[[sha256.Size]byte]corev1.PodSpec{}}

// intern returns spec, its slices, maps and pointers those of the pool's
// spec that is the same but for the node name, which stays spec's. A spec
// that does not encode stays its own.
func (p *specPool) intern(spec corev1.PodSpec) corev1.PodSpec {
	node := spec.NodeName
	spec.NodeName = ""
	raw, err := json.Marshal(&spec)
	if err != nil {
		spec.NodeName = node
		return spec
	}
	key := sha256.Sum256(raw)
	p.mu.Lock()
	if pooled, ok := p.specs[key]; ok {
		spec = pooled
	} else {
		if len(p.specs) >= p.max {
			clear(p.specs)
		}
		for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range cs {
				cs[i].Name, cs[i].Image = shared.intern(cs[i].Name), shared.intern(cs[i].Image)
			}
		}
		p.specs[key] = spec
	}
	p.mu.Unlock()
	spec.NodeName = node
	return spec
}

// internPod pools the repeating strings of a trimmed pod: its metadata but
// names, UIDs and versions, and of its status what names a kind, a node or
// an image. Strings unique to a pod (IPs, container IDs, messages) stay.
func (p *pool) internPod(pod *corev1.Pod) {
	pod.Namespace = p.intern(pod.Namespace)
	pod.GenerateName = p.intern(pod.GenerateName)
	pod.Labels = p.internMap(pod.Labels)
	pod.Annotations = p.internMap(pod.Annotations)
	pod.Finalizers = p.internSlice(pod.Finalizers)
	for i := range pod.OwnerReferences {
		ref := &pod.OwnerReferences[i]
		ref.APIVersion, ref.Kind, ref.Name = p.intern(ref.APIVersion), p.intern(ref.Kind), p.intern(ref.Name)
	}

	// The spec's own fields, not what they point to: a source pod's spec
	// may be shared (specPool), and its containers were pooled before.
	spec := &pod.Spec
	spec.SchedulerName, spec.NodeName = p.intern(spec.SchedulerName), p.intern(spec.NodeName)

	st := &pod.Status
	st.Phase = corev1.PodPhase(p.intern(string(st.Phase)))
	st.QOSClass = corev1.PodQOSClass(p.intern(string(st.QOSClass)))
	st.HostIP = p.intern(st.HostIP)
	for i := range st.HostIPs {
		st.HostIPs[i].IP = p.intern(st.HostIPs[i].IP)
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type = corev1.PodConditionType(p.intern(string(c.Type)))
		c.Status = corev1.ConditionStatus(p.intern(string(c.Status)))
		c.Reason = p.intern(c.Reason)
	}
	for _, cs := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for i := range cs {
			cs[i].Name, cs[i].Image, cs[i].ImageID = p.intern(cs[i].Name), p.intern(cs[i].Image), p.intern(cs[i].ImageID)
		}
	}
}

func (p *pool) internSlice(s []string) []string {
	for i := range s {
		s[i] = p.intern(s[i])
	}
	return s
}
