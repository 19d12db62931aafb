package scheduler

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestDeleted(t *testing.T) {
	now := metav1.Now()
	pod := func(uid types.UID, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}}
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "c")
	for _, tc := range []struct {
		name   string
		cached *corev1.Pod
		err    error
		want   bool
	}{
		{"gone from the cache", nil, notFound, true},
		{"being deleted", pod("u1", true), nil, true},
		{"still there: reported", pod("u1", false), nil, false},
		{"another pod of the name, being deleted: reported", pod("u2", true), nil, false},
		{"the cache failed: reported", nil, errors.New("boom"), false},
	} {
		if got := deleted("u1", tc.cached, tc.err); got != tc.want {
			t.Errorf("%s: deleted = %t, want %t", tc.name, got, tc.want)
		}
	}
}
