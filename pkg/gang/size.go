package gang

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrNotAGang is SizeOf's error for a scheduling group whose PodGroup's
// policy is not a gang's (basic): its pods are ordinary pods, and nothing
// is wrong.
var ErrNotAGang = errors.New("the PodGroup has no gang policy")

// ErrBadSize is wrapped by SizeOf's errors for an object that declares no
// usable size (a PodGroup's minMember out of range, a Kubernetes PodGroup's
// minCount out of range, a JobSet without replicated jobs): the declaration is
// malformed, which waiting does not mend.
var ErrBadSize = errors.New("no usable size")

// ReadFailed reports whether SizeOf's error is a failure to read the
// object (a timeout, a refusal, a server error, a lost connection) rather
// than an answer about it (none, NotFound, a kind the cluster does not
// serve, no gang policy, a malformed size). A gang whose size could not
// be read waits: placing its members one by one would break all or
// nothing on a hiccup of the API server.
func ReadFailed(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrNotAGang), errors.Is(err, ErrBadSize),
		apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return false
	}
	return true
}

// JobSetResource is JobSet's kind, which may give a gang's size (its
// replicated jobs' pods) where its members do not.
var JobSetResource = schema.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"}

// SizeOf reads the size of gang s, in namespace, from what declares it
// where its members give none: its PodGroup's spec.minMember, its
// Kubernetes PodGroup's gang policy (minCount), its Job's parallelism (no
// more than its completions), or the pods of its JobSet's replicated jobs.
// The error says why there is none (ErrNotAGang for a Kubernetes PodGroup
// whose policy is not a gang's).
func SizeOf(ctx context.Context, r client.Reader, namespace string, s Spec) (int, error) {
	switch s.Source {
	case FromSchedulingGroup:
		return schedulingGroupSize(ctx, r, namespace, s.Name)
	case FromJob:
		job := &batchv1.Job{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: s.Name}, job); err != nil {
			return 0, err
		}
		return checked(jobPods(job.Spec.Parallelism, job.Spec.Completions))
	case FromJobSet:
		return jobSetSize(ctx, r, namespace, s.Name)
	}
	pg := &unstructured.Unstructured{}
	pg.SetGroupVersionKind(PodGroupResource)
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: s.Name}, pg); err != nil {
		return 0, err
	}
	n, ok := MinMemberOf(pg)
	if !ok {
		return 0, fmt.Errorf("PodGroup %s: spec.minMember is not a whole number from 1 to %d: %w", s.Name, MaxMinMember, ErrBadSize)
	}
	return n, nil
}

// SchedulingGroupResources are the versions of Kubernetes' own PodGroup,
// newest first: a cluster serves one of them (v1beta1 from 1.37, v1alpha2
// in 1.36) when its GenericWorkload feature is on. They are read
// unstructured, so one agent reads either from a cluster of either minor.
var SchedulingGroupResources = []schema.GroupVersionKind{
	{Group: "scheduling.k8s.io", Version: "v1beta1", Kind: "PodGroup"},
	{Group: "scheduling.k8s.io", Version: "v1alpha2", Kind: "PodGroup"},
}

// schedulingGroupSize is the minCount of the gang policy of PodGroup name,
// in the first version of SchedulingGroupResources the cluster serves.
func schedulingGroupSize(ctx context.Context, r client.Reader, namespace, name string) (int, error) {
	var err error
	for _, gvk := range SchedulingGroupResources {
		pg := &unstructured.Unstructured{}
		pg.SetGroupVersionKind(gvk)
		err = r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pg)
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return 0, err
		}
		policy, found, perr := unstructured.NestedMap(pg.Object, "spec", "schedulingPolicy")
		if perr != nil || !found {
			return 0, fmt.Errorf("PodGroup %s (%s) has no spec.schedulingPolicy: %w", name, gvk.GroupVersion(), ErrBadSize)
		}
		if _, gang := policy["gang"]; !gang {
			return 0, ErrNotAGang
		}
		n, found, perr := unstructured.NestedInt64(policy, "gang", "minCount")
		if perr != nil || !found {
			return 0, fmt.Errorf("PodGroup %s (%s): spec.schedulingPolicy.gang.minCount is not a whole number: %w", name, gvk.GroupVersion(), ErrBadSize)
		}
		return checked(n)
	}
	return 0, err
}

// jobSetSize adds up the pods of a JobSet's replicated jobs: replicas
// (default 1) times each Job template's pods.
func jobSetSize(ctx context.Context, r client.Reader, namespace, name string) (int, error) {
	js := &unstructured.Unstructured{}
	js.SetGroupVersionKind(JobSetResource)
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, js); err != nil {
		return 0, err
	}
	jobs, found, err := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	if err != nil || !found || len(jobs) == 0 {
		return 0, fmt.Errorf("JobSet %s has no spec.replicatedJobs: %w", name, ErrBadSize)
	}
	var total int64
	for _, j := range jobs {
		rj, ok := j.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("JobSet %s: a replicated job is not an object: %w", name, ErrBadSize)
		}
		replicas, found, err := unstructured.NestedInt64(rj, "replicas")
		if err != nil {
			return 0, fmt.Errorf("JobSet %s: replicas: %w (%w)", name, err, ErrBadSize)
		}
		if !found {
			replicas = 1
		}
		var parallelism, completions *int32
		if v, found, err := unstructured.NestedInt64(rj, "template", "spec", "parallelism"); err == nil && found {
			parallelism = ptr.To(int32(v))
		}
		if v, found, err := unstructured.NestedInt64(rj, "template", "spec", "completions"); err == nil && found {
			completions = ptr.To(int32(v))
		}
		total += replicas * jobPods(parallelism, completions)
		if total > MaxMinMember {
			break
		}
	}
	return checked(total)
}

// jobPods is how many pods a Job runs at once from its start: its
// parallelism (default 1), no more than its completions when set.
func jobPods(parallelism, completions *int32) int64 {
	n := int64(1)
	if parallelism != nil {
		n = int64(*parallelism)
	}
	if completions != nil && int64(*completions) < n {
		n = int64(*completions)
	}
	return n
}

func checked(n int64) (int, error) {
	if n < 1 || n > MaxMinMember {
		return 0, fmt.Errorf("a gang of %d: want a whole number from 1 to %d: %w", n, MaxMinMember, ErrBadSize)
	}
	return int(n), nil
}
