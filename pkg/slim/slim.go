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
)

// SourcePod is the transform of the agent's cache of source pods, which
// placement and every virtual node share. Placement reads the metadata (the
// saved original spec is an annotation), spec.schedulerName and
// spec.nodeName, and of a gang's members spec.priority (the gangs' order)
// and spec.workloadRef (a Workload's gang); it writes only with patches. Status mirroring reads the
// status, the containers' names, images and restart policies, and the
// readiness gates; the virtual nodes write the cached pod
// back through pods/status, where the API server keeps the stored spec
// whatever the request carries.
func SourcePod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	pod.Spec = corev1.PodSpec{
		SchedulerName:  pod.Spec.SchedulerName,
		NodeName:       pod.Spec.NodeName,
		InitContainers: containerNames(pod.Spec.InitContainers),
		Containers:     containerNames(pod.Spec.Containers),
		ReadinessGates: pod.Spec.ReadinessGates,
		Priority:       pod.Spec.Priority,
		WorkloadRef:    pod.Spec.WorkloadRef,
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

func containerNames(in []corev1.Container) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: c.Name, Image: c.Image, RestartPolicy: c.RestartPolicy}
	}
	return out
}
