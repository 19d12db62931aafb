// Package slim trims pods before they enter the agent's caches. The agent
// caches every source pod (for placement and the virtual nodes) and every
// candidate in every target; each cache
// keeps only what its readers use, so that thousands of pods in flight cost
// tens of MiB instead of hundreds.
//
// Each function is a client-go TransformFunc: it is given objects as they
// come off the watch, may be given an object it already trimmed, and passes
// anything that is not a *corev1.Pod through unchanged.
//
// Strings that repeat from pod to pod are shared between the cached pods
// (intern.go).
//
// Metadata always stays whole (except managedFields): a client that writes a
// cached pod back, as the virtual nodes do through pods/status, sends its
// labels and annotations too, and the API server applies them.
package slim

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
)

// SourcePod is the transform of the agent's cache of source pods, which
// placement and every virtual node share. Placement reads the metadata,
// what the pod's candidates run (sourcespec.Original: the pod's spec with
// its original fields; or, on pods admitted before original-fields, the
// saved spec, an annotation), spec.schedulerName and spec.nodeName, and of
// a gang's members spec.priority (the gangs' order) and
// spec.schedulingGroup (a Kubernetes PodGroup's gang); it writes only with patches. Status mirroring reads
// the status, the containers' names, images and restart policies, and the
// readiness gates; the virtual nodes write the cached pod back through
// pods/status, where the API server keeps the stored spec whatever the
// request carries.
//
// The spec of a pod with original fields stays, without the source's
// service-account token (no candidate runs it, and its volume's name is
// the one part of the spec that differs between the pods of a workload),
// and is shared with every cached pod whose spec is the same but for its
// node: a workload's pods cost one spec. Nobody may change it.
func SourcePod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	if _, ok := pod.Annotations[protocol.OriginalFieldsAnnotation]; ok {
		pod.Spec = sharedSpecs.intern(sourcespec.WithoutServiceAccountToken(pod.Spec))
	} else {
		pod.Spec = corev1.PodSpec{
			SchedulerName:   pod.Spec.SchedulerName,
			NodeName:        pod.Spec.NodeName,
			InitContainers:  shared.containerNames(pod.Spec.InitContainers),
			Containers:      shared.containerNames(pod.Spec.Containers),
			ReadinessGates:  pod.Spec.ReadinessGates,
			Priority:        pod.Spec.Priority,
			SchedulingGroup: pod.Spec.SchedulingGroup,
		}
	}
	shared.internPod(pod)
	return pod, nil
}

// Candidate is the transform of a target's cache of candidates. The source
// reads their metadata (state, allowance), spec.nodeName and the whole
// status (unschedulable reasons, and the delegate's status it mirrors); it
// writes candidates only with patches.
func Candidate(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	pod.Spec = corev1.PodSpec{SchedulerName: pod.Spec.SchedulerName, NodeName: pod.Spec.NodeName}
	shared.internPod(pod)
	return pod, nil
}

// containerNames returns new containers with only the names, images and
// restart policies of in, their strings pooled.
func (p *pool) containerNames(in []corev1.Container) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: p.intern(c.Name), Image: p.intern(c.Image), RestartPolicy: c.RestartPolicy}
	}
	return out
}
