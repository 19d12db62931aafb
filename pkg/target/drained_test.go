package target

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestDrained: a target is marked drained only once it is out of the set,
// and a target added again under that name is not drained.
func TestDrained(t *testing.T) {
	t1 := &Target{Name: "t1", NodeName: "flotilla-t1"}
	s := NewSet(t1)
	s.MarkDrained("t1")
	if s.Drained("t1") {
		t.Fatal("a target still in the set is drained")
	}
	s.Drain(t1)
	if _, ok := s.Get("t1"); ok {
		t.Fatal("a target being drained is still in the set")
	}
	onT1 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		protocol.ElectionAnnotation: protocol.Election{Generation: 1, Target: "t1", Nonce: "n"}.Encode(),
	}}, Spec: corev1.PodSpec{NodeName: "flotilla-t1"}}
	if got, ok := s.OfPod(onT1); !ok || got != t1 {
		t.Fatal("a target being drained is not found by its virtual node, where its pods still run")
	}
	s.MarkDrained("t1")
	if !s.Drained("t1") {
		t.Fatal("a removed target marked drained is not")
	}
	s.Add(&Target{Name: "t1", NodeName: "flotilla-t1"})
	if s.Drained("t1") {
		t.Fatal("a target added again under the name is still drained")
	}
	s.Remove(t1)
	if got, ok := s.OfPod(onT1); !ok || got == t1 {
		t.Fatal("the drained target, removed, is still found, or the new one is not")
	}
}

// TestKeptOnDrain: a draining target keeps the delegates of pods bound to
// it and a bound candidate of a pod elected there and not bound yet (its
// running copy); it deletes every other candidate: waiting ones, those of
// pods gone or elected elsewhere.
func TestKeptOnDrain(t *testing.T) {
	const name, node, legacy = "a/t1", "flotilla.a.t1", "flotilla-a-t1"
	tg := &Target{Name: name, Namespace: "a", NodeName: node, LegacyNodeName: legacy}
	elected := func(target string) map[string]string {
		return map[string]string{protocol.ElectionAnnotation: protocol.Election{Generation: 1, Target: target, Nonce: "n"}.Encode()}
	}
	bound := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node-a"}}
	waiting := &corev1.Pod{}
	for _, tc := range []struct {
		name      string
		cand, src *corev1.Pod
		want      drainKeep
	}{
		{"the delegate of a pod bound to the target", bound, &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}}, delegateKept},
		{"the delegate of a pod bound to the target and being deleted", bound, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{}}, Spec: corev1.PodSpec{NodeName: node}}, delegateKept},
		{"bound, its pod elected there and not bound yet", bound, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: elected(name)}}, bindingKept},
		{"waiting, its pod elected there", waiting, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: elected(name)}}, deleted},
		{"bound, its pod elected elsewhere", bound, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: elected("t2")}}, deleted},
		{"bound, its pod bound elsewhere", bound, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: elected(name)}, Spec: corev1.PodSpec{NodeName: "flotilla-t2"}}, deleted},
		{"bound, its pod not elected", bound, &corev1.Pod{}, deleted},
		{"the delegate of a pod bound to the node of the old form, elected there", bound, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: elected(name)}, Spec: corev1.PodSpec{NodeName: legacy}}, delegateKept},
		{"bound, its pod on the node of the old form elected for the ClusterTarget that shared it", bound, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: elected("a-t1")}, Spec: corev1.PodSpec{NodeName: legacy}}, deleted},
		{"bound, its pod gone", bound, nil, deleted},
		{"bound, its pod being deleted", bound, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: elected(name), DeletionTimestamp: &metav1.Time{}}}, deleted},
	} {
		if got := keptOnDrain(tc.cand, tc.src, tg); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
