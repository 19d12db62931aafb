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

// TestRoundReadsChange: an update of a candidate brings its source pod to
// the queue when it changes what the round reads (the state report, an
// allowance or denial, a label, its deletion, its node, its PodScheduled
// condition), and not when it changes only the status its kubelet writes
// once it runs (each such update was a round that found what the last one
// did), nor when it is the same object again.
func TestRoundReadsChange(t *testing.T) {
	base := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "c1", ResourceVersion: "1",
				Labels:      map[string]string{protocol.SourceUIDLabel: "u1"},
				Annotations: map[string]string{protocol.StateAnnotation: "Reserved"}},
			Spec: corev1.PodSpec{SchedulerName: "flotilla", NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			}},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
		want   bool
	}{
		{"the same object again", func(p *corev1.Pod) {}, false},
		{"relisted, its version only", func(p *corev1.Pod) { p.ResourceVersion = "2" }, false},
		{"running: phase, IP, Ready", func(p *corev1.Pod) {
			p.ResourceVersion = "2"
			p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1"
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Ready: true}}
		}, false},
		{"its state reported", func(p *corev1.Pod) {
			p.ResourceVersion = "2"
			p.Annotations = map[string]string{protocol.StateAnnotation: "Bound"}
		}, true},
		{"allowed", func(p *corev1.Pod) {
			p.ResourceVersion = "2"
			p.Annotations = map[string]string{protocol.StateAnnotation: "Reserved", protocol.AllowedAnnotation: "x"}
		}, true},
		{"a label", func(p *corev1.Pod) {
			p.ResourceVersion = "2"
			p.Labels = map[string]string{protocol.SourceUIDLabel: "u2"}
		}, true},
		{"being deleted", func(p *corev1.Pod) { p.ResourceVersion = "2"; p.DeletionTimestamp = &metav1.Time{} }, true},
		{"bound elsewhere", func(p *corev1.Pod) { p.ResourceVersion = "2"; p.Spec.NodeName = "n2" }, true},
		{"unschedulable", func(p *corev1.Pod) {
			p.ResourceVersion = "2"
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes"}}
		}, true},
		{"its PodScheduled condition dropped", func(p *corev1.Pod) { p.ResourceVersion = "2"; p.Status.Conditions = nil }, true},
	} {
		old, cand := base(), base()
		tc.change(cand)
		if got := roundReadsChange(old, cand); got != tc.want {
			t.Errorf("%s: roundReadsChange = %v, want %v", tc.name, got, tc.want)
		}
	}
}
