package slim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func fullPod() *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "p", UID: "u", ResourceVersion: "7",
			Labels:        map[string]string{"app": "a"},
			Annotations:   map[string]string{"multicluster.flotilla.dev/source-spec": `{"containers":[]}`},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: corev1.PodSpec{
			SchedulerName:  "flotilla-source",
			NodeName:       "flotilla-t1",
			InitContainers: []corev1.Container{{Name: "proxy", Image: "proxy:1", RestartPolicy: &always, Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
			Containers: []corev1.Container{{
				Name: "app", Image: "app:1",
				Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "token", MountPath: "/var/run/secrets"}},
			}},
			Volumes:        []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](420)}}}},
			Tolerations:    []corev1.Toleration{{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/ready"}},
			Priority:       ptr.To[int32](1000),
			WorkloadRef:    &corev1.WorkloadReference{Name: "train", PodGroup: "workers"},
		},
		Status: corev1.PodStatus{
			Phase:             corev1.PodRunning,
			PodIP:             "10.0.0.1",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true}},
		},
	}
}

// TestTransforms checks what each cache keeps: metadata whole but for
// managedFields (dropping a label or annotation would let a write-back erase
// it), and of spec and status what that cache's readers use.
func TestTransforms(t *testing.T) {
	for _, tc := range []struct {
		name      string
		transform cache.TransformFunc
		spec      func(corev1.PodSpec) corev1.PodSpec
		status    func(corev1.PodStatus) corev1.PodStatus
	}{
		{"source pod", SourcePod,
			func(s corev1.PodSpec) corev1.PodSpec {
				return corev1.PodSpec{
					SchedulerName:  s.SchedulerName,
					NodeName:       s.NodeName,
					InitContainers: []corev1.Container{{Name: "proxy", Image: "proxy:1", RestartPolicy: s.InitContainers[0].RestartPolicy}},
					Containers:     []corev1.Container{{Name: "app", Image: "app:1"}},
					ReadinessGates: s.ReadinessGates,
					Priority:       s.Priority,
					WorkloadRef:    s.WorkloadRef,
				}
			},
			func(s corev1.PodStatus) corev1.PodStatus { return s }},
		{"candidate", Candidate,
			func(s corev1.PodSpec) corev1.PodSpec {
				return corev1.PodSpec{SchedulerName: s.SchedulerName, NodeName: s.NodeName}
			},
			func(s corev1.PodStatus) corev1.PodStatus { return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := fullPod()
			out, err := tc.transform(fullPod())
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*corev1.Pod)
			wantMeta := full.ObjectMeta
			wantMeta.ManagedFields = nil
			if !equality.Semantic.DeepEqual(got.ObjectMeta, wantMeta) {
				t.Errorf("metadata changed:\n got %+v\nwant %+v", got.ObjectMeta, wantMeta)
			}
			if want := tc.spec(full.Spec); !equality.Semantic.DeepEqual(got.Spec, want) {
				t.Errorf("spec:\n got %+v\nwant %+v", got.Spec, want)
			}
			if want := tc.status(full.Status); !equality.Semantic.DeepEqual(got.Status, want) {
				t.Errorf("status:\n got %+v\nwant %+v", got.Status, want)
			}
			// Trimming a trimmed pod changes nothing.
			again, err := tc.transform(got.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(again, got) {
				t.Errorf("not idempotent:\n first %+v\nsecond %+v", got, again)
			}
			// Tombstones and other objects pass through.
			tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: fullPod()}
			if passed, err := tc.transform(tomb); err != nil || !equality.Semantic.DeepEqual(passed, tomb) {
				t.Errorf("a tombstone came out as %+v, %v", passed, err)
			}
		})
	}
}
