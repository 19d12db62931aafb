package reservation

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestMayMove: the updates of a source pod that bring it to the queue are
// those that may give its round something to do: any of a pod not bound
// yet, the one that binds it, and any of a pod being deleted; not those of
// a pod bound before and after (the status its virtual node mirrors, each
// a round that found nothing to do).
func TestMayMove(t *testing.T) {
	pod := func(node string, deleting bool, phase corev1.PodPhase) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	for _, tc := range []struct {
		name          string
		before, after *corev1.Pod
		want          bool
	}{
		{"unbound, its election written", pod("", false, corev1.PodPending), pod("", false, corev1.PodPending), true},
		{"bound by this update", pod("", false, corev1.PodPending), pod("vn", false, corev1.PodPending), true},
		{"bound, its status mirrored", pod("vn", false, corev1.PodPending), pod("vn", false, corev1.PodRunning), false},
		{"bound, being deleted", pod("vn", false, corev1.PodRunning), pod("vn", true, corev1.PodRunning), true},
		{"bound, deleted, its status mirrored", pod("vn", true, corev1.PodRunning), pod("vn", true, corev1.PodSucceeded), true},
	} {
		if got := mayMove(event.UpdateEvent{ObjectOld: tc.before, ObjectNew: tc.after}); got != tc.want {
			t.Errorf("%s: mayMove = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDelegateOfBound: a candidate's changes skip its source pod's round
// only when it is bound and the cached pod (the same pod: its UID) is
// bound and not being deleted. The binding that the pod's round must
// adopt, a candidate not bound (made late, to be deleted), another pod's
// of the same name, and any candidate of a pod being deleted still bring
// the pod.
func TestDelegateOfBound(t *testing.T) {
	source := func(node string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}, Spec: corev1.PodSpec{NodeName: node}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	cand := func(uid, node string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Labels:      map[string]string{protocol.SourceUIDLabel: uid},
				Annotations: map[string]string{protocol.SourceNamespaceAnnotation: "ns", protocol.SourceNameAnnotation: "p"},
			},
			Spec: corev1.PodSpec{NodeName: node},
		}
	}
	for _, tc := range []struct {
		name   string
		source *corev1.Pod
		cand   *corev1.Pod
		want   bool
	}{
		{"the delegate of a bound pod", source("vn", false), cand("u1", "n1"), true},
		{"the binding to adopt", source("", false), cand("u1", "n1"), false},
		{"a candidate not bound", source("vn", false), cand("u1", ""), false},
		{"another pod's of that name", source("vn", false), cand("u0", "n1"), false},
		{"the delegate of a pod being deleted", source("vn", true), cand("u1", "n1"), false},
		{"a pod not in the cache", nil, cand("u1", "n1"), false},
	} {
		store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
		if tc.source != nil {
			if err := store.Add(tc.source); err != nil {
				t.Fatal(err)
			}
		}
		c := &Controller{SourcePods: store}
		if got := c.delegateOfBound(tc.cand); got != tc.want {
			t.Errorf("%s: delegateOfBound = %v, want %v", tc.name, got, tc.want)
		}
	}
}
