package gang

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestSizeOf(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ns := "shop"
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
	job := func(name string, parallelism, completions *int32) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: meta(name), Spec: batchv1.JobSpec{Parallelism: parallelism, Completions: completions}}
	}
	workers := &schedulingv1beta1.PodGroup{ObjectMeta: meta("workers"), Spec: schedulingv1beta1.PodGroupSpec{
		SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 8}}}}
	driver := &schedulingv1beta1.PodGroup{ObjectMeta: meta("driver"), Spec: schedulingv1beta1.PodGroupSpec{
		SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Basic: &schedulingv1beta1.BasicSchedulingPolicy{}}}}
	unstr := func(gvkObj map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: gvkObj}
	}
	podGroup := unstr(map[string]any{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"namespace": ns, "name": "pg"}, "spec": map[string]any{"minMember": int64(5)}})
	jobSet := unstr(map[string]any{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"namespace": ns, "name": "mpi"},
		"spec": map[string]any{"replicatedJobs": []any{
			map[string]any{"name": "launcher", "template": map[string]any{"spec": map[string]any{}}},
			map[string]any{"name": "workers", "replicas": int64(2), "template": map[string]any{"spec": map[string]any{"parallelism": int64(4), "completions": int64(4)}}},
		}}})
	r := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(
		job("wide", ptr.To[int32](4), nil), job("capped", ptr.To[int32](8), ptr.To[int32](3)), job("plain", nil, nil),
		workers, driver,
	).Build()
	// The fake client takes unstructured objects of kinds its scheme
	// does not know only through Create.
	for _, o := range []client.Object{podGroup, jobSet} {
		if err := r.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		spec    Spec
		want    int
		wantErr string
	}{
		{Spec{Name: "pg", Source: FromPodGroup}, 5, ""},
		{Spec{Name: "none", Source: FromPodGroup}, 0, "not found"},
		{Spec{Name: "wide", Source: FromJob}, 4, ""},
		{Spec{Name: "capped", Source: FromJob}, 3, ""},
		{Spec{Name: "plain", Source: FromJob}, 1, ""},
		{Spec{Name: "gone", Source: FromJob}, 0, "not found"},
		{Spec{Name: "workers", Source: FromSchedulingGroup}, 8, ""},
		{Spec{Name: "other", Source: FromSchedulingGroup}, 0, "not found"},
		{Spec{Name: "mpi", Source: FromJobSet}, 9, ""},
	} {
		got, err := SizeOf(t.Context(), r, ns, tc.spec)
		switch {
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %d, %v; want %d", tc.spec, got, err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %d, %v; want an error naming %q", tc.spec, got, err, tc.wantErr)
		}
	}
	if _, err := SizeOf(t.Context(), r, ns, Spec{Name: "driver", Source: FromSchedulingGroup}); !errors.Is(err, ErrNotAGang) {
		t.Errorf("a basic PodGroup: %v, want ErrNotAGang", err)
	}
}

// TestSchedulingGroupSizeOfEachMinor: a source of 1.36 serves Kubernetes'
// PodGroup as v1alpha2 only, one of 1.37 as v1beta1; the size is read
// from whichever the cluster serves, and a cluster serving neither is
// told apart from one that failed to answer.
func TestSchedulingGroupSizeOfEachMinor(t *testing.T) {
	alpha2 := schema.GroupVersionKind{Group: "scheduling.k8s.io", Version: "v1alpha2", Kind: "PodGroup"}
	c := crfake.NewClientBuilder().WithScheme(runtime.NewScheme()).Build()
	pg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
		"metadata": map[string]any{"namespace": "shop", "name": "workers"},
		"spec":     map[string]any{"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(6)}}}}}
	if err := c.Create(t.Context(), pg); err != nil {
		t.Fatal(err)
	}
	v136 := serving{Reader: c, kinds: []schema.GroupVersionKind{alpha2}}
	if n, err := SizeOf(t.Context(), v136, "shop", Spec{Name: "workers", Source: FromSchedulingGroup}); err != nil || n != 6 {
		t.Errorf("a 1.36 cluster's v1alpha2 PodGroup: %d, %v; want 6", n, err)
	}
	_, err := SizeOf(t.Context(), serving{Reader: c}, "shop", Spec{Name: "workers", Source: FromSchedulingGroup})
	if !meta.IsNoMatchError(err) || ReadFailed(err) {
		t.Errorf("a cluster without the PodGroup API: %v; want a no-match error, not a failed read", err)
	}
}

// serving is a cluster that serves only kinds: the others have no match,
// as a RESTMapper says of a kind the API server does not serve.
type serving struct {
	client.Reader
	kinds []schema.GroupVersionKind
}

func (s serving) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if !slices.Contains(s.kinds, gvk) {
		return &meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
	}
	return s.Reader.Get(ctx, key, obj, opts...)
}

// TestReadFailed: a failure to read a gang's size keeps its members
// waiting; an answer about the object does not.
func TestReadFailed(t *testing.T) {
	gr := schema.GroupResource{Group: "batch", Resource: "jobs"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{ErrNotAGang, false},
		{fmt.Errorf("PodGroup x: %w", ErrBadSize), false},
		{apierrors.NewNotFound(gr, "train"), false},
		{&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "scheduling.x-k8s.io", Kind: "PodGroup"}}, false},
		{apierrors.NewForbidden(gr, "train", errors.New("no")), true},
		{apierrors.NewInternalError(errors.New("etcd")), true},
		{apierrors.NewServiceUnavailable("later"), true},
		{apierrors.NewTimeoutError("slow", 1), true},
		{apierrors.NewTooManyRequests("later", 1), true},
		{context.DeadlineExceeded, true},
		{&url.Error{Op: "Get", URL: "https://127.0.0.1:1", Err: errors.New("connection refused")}, true},
	} {
		if got := ReadFailed(tc.err); got != tc.want {
			t.Errorf("ReadFailed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
