package webhook

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func TestMakeSourceIsIdempotent(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{protocol.ElectLabel: "true"}},
		Spec: corev1.PodSpec{SchedulerName: "default-scheduler", Containers: []corev1.Container{{Name: "c", Image: "i"}},
			// As DefaultTolerationSeconds admission leaves them.
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			}},
	}
	if !OptedIn(pod) {
		t.Fatal("labelled pod not opted in")
	}
	changed, err := MakeSource(pod)
	if err != nil || !changed {
		t.Fatalf("first admission: changed=%v err=%v", changed, err)
	}
	var saved corev1.PodSpec
	if err := json.Unmarshal([]byte(pod.Annotations[protocol.SourceSpecAnnotation]), &saved); err != nil {
		t.Fatal(err)
	}
	if saved.SchedulerName != "default-scheduler" || len(saved.Tolerations) != 2 {
		t.Errorf("saved spec is not the original: %+v", saved)
	}
	if pod.Spec.SchedulerName != protocol.SourceSchedulerName || len(pod.Spec.Tolerations) != 3 {
		t.Errorf("source pod not prepared: %+v", pod.Spec)
	}
	for _, tol := range pod.Spec.Tolerations {
		if tol.TolerationSeconds != nil {
			t.Errorf("a source pod must not be evicted from a virtual node after a time limit: %+v", tol)
		}
	}
	before := pod.Annotations[protocol.SourceSpecAnnotation]
	changed, err = MakeSource(pod)
	if err != nil || changed {
		t.Fatalf("reinvocation changed the pod (changed=%v err=%v)", changed, err)
	}
	if pod.Annotations[protocol.SourceSpecAnnotation] != before || len(pod.Spec.Tolerations) != 3 {
		t.Error("reinvocation rewrote the saved spec or duplicated the toleration")
	}
}

func TestOptedIn(t *testing.T) {
	for _, tt := range []struct {
		labels map[string]string
		want   bool
	}{
		{nil, false},
		{map[string]string{protocol.ElectLabel: "false"}, false},
		{map[string]string{protocol.ElectLabel: "true"}, true},
		{map[string]string{protocol.ElectLabel: "true", protocol.CandidateLabel: "true"}, false},
	} {
		if got := OptedIn(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels}}); got != tt.want {
			t.Errorf("OptedIn(%v) = %v, want %v", tt.labels, got, tt.want)
		}
	}
}
