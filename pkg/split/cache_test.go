package split

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

func TestCacheReader(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pod := func(name string, labels map[string]string, phase corev1.PodPhase) *corev1.Pod {
		l := map[string]string{"pod-template-hash": "abc"}
		for k, v := range labels {
			l[k] = v
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name), Labels: l, CreationTimestamp: created,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs", Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: phase},
		}
		if phase == corev1.PodRunning {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: created}}
		}
		return p
	}
	onDemand := map[string]string{protocol.CapacityTypeLabel: protocol.CapacityOnDemand, protocol.OnDemandSlotLabel: "1"}
	shared := pod("shared", onDemand, corev1.PodRunning)
	sources := fake.NewClientBuilder().WithIndex(&corev1.Pod{}, workload.PodIndex, workload.IndexPod).
		WithObjects(shared, pod("done", nil, corev1.PodSucceeded)).Build()
	own := fake.NewClientBuilder().WithIndex(&corev1.Pod{}, workload.PodIndex, workload.IndexPod).
		WithObjects(shared.DeepCopy(), pod("pending", nil, corev1.PodPending), pod("failed", nil, corev1.PodFailed)).Build()
	live := fake.NewClientBuilder().WithObjects(&appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "web", Generation: 2,
			Annotations: map[string]string{protocol.MaxOnDemandAnnotation: "2", "big": "x"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}},
	}).Build()
	r := &CacheReader{PodCaches: []client.Reader{sources, own}, Objects: fake.NewClientBuilder().Build()}
	key := workload.Key{Kind: "Deployment", Name: "web"}

	members, err := r.Members(t.Context(), "ns", key)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 2 {
		t.Fatalf("members %+v, want shared once and pending; finished pods left out", members)
	}
	for _, m := range members {
		switch m.Name {
		case "shared":
			if !m.Placed || m.Place != (Place{OnDemand: true, Slot: 1}) || !m.ReadySince.Equal(created.Time) {
				t.Errorf("shared: %+v", m)
			}
		case "pending":
			if m.Placed || !m.ReadySince.IsZero() {
				t.Errorf("pending: %+v", m)
			}
		}
	}

	if w, err := r.Workload(t.Context(), "ns", key); w != nil || err != nil {
		t.Errorf("without a live reader, a workload the cache misses: %+v, %v", w, err)
	}
	r.Live = live
	w, err := r.Workload(t.Context(), "ns", key)
	if err != nil || w == nil {
		t.Fatalf("live read: %+v, %v", w, err)
	}
	if w.Status.Replicas != 3 || w.Status.Generation != 2 || w.Annotations[protocol.MaxOnDemandAnnotation] != "2" || len(w.Annotations) != 1 || w.TemplateLabels["app"] != "web" {
		t.Errorf("workload %+v", w)
	}
	if w, err := r.Workload(t.Context(), "ns", workload.Key{Kind: "Job", Name: "web"}); w != nil || err != nil {
		t.Errorf("a Job: %+v, %v", w, err)
	}
}

func TestTrimKeepsWhatIsRead(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"big": "x"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-abc", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
	out, _ := TrimPod(p)
	trimmed := out.(*corev1.Pod)
	if MemberOf(trimmed) != MemberOf(p) || len(trimmed.Spec.Containers) != 0 || trimmed.Annotations != nil || len(trimmed.Status.Conditions) != 1 {
		t.Errorf("trimmed pod %+v", trimmed)
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{protocol.MaxOnDemandAnnotation: "1", "big": "x"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), MinReadySeconds: 5, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
		}},
		Status: appsv1.DeploymentStatus{ReadyReplicas: 2},
	}
	out, _ = TrimWorkload(d)
	td := out.(*appsv1.Deployment)
	if len(td.Annotations) != 1 || *td.Spec.Replicas != 2 || td.Spec.MinReadySeconds != 5 || td.Spec.Template.Labels["app"] != "web" ||
		len(td.Spec.Template.Spec.Containers) != 0 || td.Status.ReadyReplicas != 2 {
		t.Errorf("trimmed Deployment %+v", td)
	}
}
