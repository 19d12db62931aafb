package slim

import (
	"fmt"
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
			Volumes:         []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](420)}}}},
			Tolerations:     []corev1.Toleration{{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists}},
			ReadinessGates:  []corev1.PodReadinessGate{{ConditionType: "example.com/ready"}},
			Priority:        ptr.To[int32](1000),
			SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To("workers")},
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
					SchedulerName:   s.SchedulerName,
					NodeName:        s.NodeName,
					InitContainers:  []corev1.Container{{Name: "proxy", Image: "proxy:1", RestartPolicy: s.InitContainers[0].RestartPolicy}},
					Containers:      []corev1.Container{{Name: "app", Image: "app:1"}},
					ReadinessGates:  s.ReadinessGates,
					Priority:        s.Priority,
					SchedulingGroup: s.SchedulingGroup,
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

// admittedSource is a source pod with original fields, as the webhook
// admits one: its token volume's name is its own, like the pods of a
// workload each have.
func admittedSource(name, node, image string) *corev1.Pod {
	pod := fullPod()
	pod.Name, pod.UID = name, types.UID("uid-"+name)
	pod.Annotations = map[string]string{protocol.OriginalFieldsAnnotation: `{"schedulerName":"default-scheduler"}`}
	pod.Spec.NodeName = node
	pod.Spec.Containers[0].Image = image
	token := "kube-api-access-" + name
	pod.Spec.Volumes = []corev1.Volume{
		{Name: token, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](420)}}},
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: token, MountPath: "/var/run/secrets"}, {Name: "data", MountPath: "/data"}}
	return pod
}

// TestSourcePodKeepsItsSpec: a source pod with original fields keeps the
// spec its candidates run, without the source's token, and the pods of a
// workload share it but for their node. A transform that trimmed the spec
// (Build would have nothing to run), kept the token or shared nothing
// fails here.
func TestSourcePodKeepsItsSpec(t *testing.T) {
	transform := func(p *corev1.Pod) *corev1.Pod {
		out, err := SourcePod(p)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*corev1.Pod)
	}
	a := transform(admittedSource("a", "flotilla-t1", "app:1"))
	b := transform(admittedSource("b", "flotilla-t2", "app:1"))
	other := transform(admittedSource("c", "flotilla-t1", "app:2"))

	want := admittedSource("a", "flotilla-t1", "app:1").Spec
	want.Volumes = want.Volumes[1:]
	want.Containers[0].VolumeMounts = want.Containers[0].VolumeMounts[1:]
	if !equality.Semantic.DeepEqual(a.Spec, want) {
		t.Errorf("cached spec:\n got %+v\nwant %+v", a.Spec, want)
	}
	if a.Spec.NodeName != "flotilla-t1" || b.Spec.NodeName != "flotilla-t2" {
		t.Errorf("nodes %q and %q, want each its own", a.Spec.NodeName, b.Spec.NodeName)
	}
	if &a.Spec.Containers[0] != &b.Spec.Containers[0] || &a.Spec.Volumes[0] != &b.Spec.Volumes[0] {
		t.Error("two pods of one workload keep two specs")
	}
	if &a.Spec.Containers[0] == &other.Spec.Containers[0] || other.Spec.Containers[0].Image != "app:2" {
		t.Errorf("pods of two specs share one: %+v", other.Spec.Containers)
	}
	// Trimming a trimmed pod changes nothing.
	if again := transform(a.DeepCopy()); !equality.Semantic.DeepEqual(again, a) {
		t.Errorf("not idempotent:\n first %+v\nsecond %+v", a, again)
	}
}

// TestSpecPoolBounded: specs that never repeat must not grow the pool
// without end.
func TestSpecPoolBounded(t *testing.T) {
	p := &specPool{max: 4, specs: map[[32]byte]corev1.PodSpec{}}
	for i := range 20 {
		p.intern(corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: fmt.Sprintf("app:%d", i)}}})
		if len(p.specs) > p.max {
			t.Fatalf("pool holds %d specs, bound %d", len(p.specs), p.max)
		}
	}
}
