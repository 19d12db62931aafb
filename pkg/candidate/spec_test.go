package candidate

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
)

func sourcePod(t *testing.T) *corev1.Pod {
	t.Helper()
	original := corev1.PodSpec{
		ServiceAccountName: "builder",
		NodeName:           "should-go",
		Containers: []corev1.Container{{
			Name:         "app",
			Image:        "app:1",
			VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets"}, {Name: "data", MountPath: "/data"}},
		}},
		Volumes: []corev1.Volume{
			{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		Tolerations: []corev1.Toleration{
			{Key: protocol.VirtualNodeTaintKey, Operator: corev1.TolerationOpEqual, Value: protocol.VirtualNodeTaintValue},
			{Key: "gpu", Operator: corev1.TolerationOpExists},
		},
	}
	src := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-1", Namespace: "shop", UID: "uid-1",
			Labels:      map[string]string{"app": "web", protocol.ElectLabel: "true"},
			Annotations: map[string]string{"team": "a", protocol.ElectionAnnotation: "1/c2/n"},
		},
	}
	setSpec(t, src, original)
	return src
}

// setSpec makes pod a source pod whose candidates run spec, as the webhook
// makes one: spec is the pod's, but for the scheduler name, and its
// scheduler name and tolerations are the original fields.
func setSpec(t testing.TB, pod *corev1.Pod, spec corev1.PodSpec) {
	t.Helper()
	raw, err := sourcespec.FieldsOf(&spec).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	delete(pod.Annotations, protocol.SourceSpecAnnotation)
	pod.Annotations[protocol.OriginalFieldsAnnotation] = raw
	pod.Spec = *spec.DeepCopy()
	pod.Spec.SchedulerName = protocol.SourceSchedulerName
}

func TestBuild(t *testing.T) {
	src := sourcePod(t)
	c, err := Build(src, "c1", "c2", src.Namespace, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != protocol.CandidateName("c1", "c2", "shop", "web-1", "uid-1") || c.Namespace != "shop" {
		t.Errorf("candidate %s/%s", c.Namespace, c.Name)
	}
	if c.Spec.SchedulerName != protocol.SchedulerName || c.Spec.NodeName != "" || c.Spec.ServiceAccountName != "" {
		t.Errorf("spec fields not reset: %+v", c.Spec)
	}
	if c.Spec.AutomountServiceAccountToken == nil || *c.Spec.AutomountServiceAccountToken {
		t.Error("service-account token must not be mounted")
	}
	if len(c.Spec.Volumes) != 1 || c.Spec.Volumes[0].Name != "data" || len(c.Spec.Containers[0].VolumeMounts) != 1 {
		t.Errorf("token volume not removed: %+v %+v", c.Spec.Volumes, c.Spec.Containers[0].VolumeMounts)
	}
	if len(c.Spec.Tolerations) != 1 || c.Spec.Tolerations[0].Key != "gpu" {
		t.Errorf("tolerations: %+v", c.Spec.Tolerations)
	}
	if _, ok := c.Labels[protocol.ElectLabel]; ok {
		t.Error("candidate must not carry the opt-in label, or the target would treat it as a source pod")
	}
	if c.Labels[protocol.SourceUIDLabel] != "uid-1" || c.Labels[protocol.SourceClusterLabel] != "c1" || c.Labels[protocol.CandidateLabel] != "true" ||
		c.Labels[protocol.TargetLabel] != protocol.TargetLabelValue("c2") {
		t.Errorf("labels: %v", c.Labels)
	}
	if c.Annotations["team"] != "a" || c.Annotations[protocol.OriginalFieldsAnnotation] != "" || c.Annotations[protocol.ElectionAnnotation] != "" {
		t.Errorf("annotations: %v", c.Annotations)
	}
	if c.Annotations[protocol.SourceNamespaceAnnotation] != "shop" || c.Annotations[protocol.SourceNameAnnotation] != "web-1" || c.Annotations[protocol.TargetAnnotation] != "c2" {
		t.Errorf("source annotations: %v", c.Annotations)
	}
	if len(c.OwnerReferences) != 0 {
		t.Error("a remote candidate cannot be owned by a pod of another cluster")
	}
	self, err := Build(src, "c1", "c1", src.Namespace, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(self.OwnerReferences) != 1 || self.OwnerReferences[0].UID != "uid-1" || !*self.OwnerReferences[0].Controller {
		t.Errorf("a candidate in the source cluster must be controlled by its source pod: %+v", self.OwnerReferences)
	}
}

func TestBuildRefusesBadSavedSpec(t *testing.T) {
	for _, key := range []string{protocol.OriginalFieldsAnnotation, protocol.SourceSpecAnnotation} {
		src := sourcePod(t)
		delete(src.Annotations, protocol.OriginalFieldsAnnotation)
		src.Annotations[key] = "{not json"
		if _, err := Build(src, "c1", "c2", src.Namespace, false, false); err == nil {
			t.Errorf("malformed %s accepted", key)
		}
	}
	src := sourcePod(t)
	delete(src.Annotations, protocol.OriginalFieldsAnnotation)
	if _, err := Build(src, "c1", "c2", src.Namespace, false, false); err == nil {
		t.Error("a pod the webhook did not admit accepted")
	}
}

// BenchmarkBuild builds the candidates of a burst of one workload's pods.
func BenchmarkBuild(b *testing.B) {
	t := &testing.T{}
	src := sourcePod(t)
	for b.Loop() {
		if _, err := Build(src, "c1", "c2", "shop", false, false); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBuildLabels checks where the source pod's labels travel: renamed
// under label.multicluster.flotilla.dev/ and as they are in an
// annotation, so that nothing of the target selects the candidate by
// them, unless the target's invitation keeps them; a self target never
// keeps them. Flotilla's labels of the source pod (its opt-in) never
// travel.
func TestBuildLabels(t *testing.T) {
	long := strings.Repeat("web-", 20)
	for _, tt := range []struct {
		name       string
		podName    string
		self, keep bool
		wantLabels map[string]string
		wantAnno   map[string]string // the source-labels annotation, decoded; nil: none
	}{
		{
			name: "by default renamed, and as they are in the annotation", podName: "web-1",
			wantLabels: map[string]string{protocol.SourceNameLabel: "web-1", "label.multicluster.flotilla.dev/app": "web", "label.multicluster.flotilla.dev/tier": "front"},
			wantAnno:   map[string]string{"app": "web", "tier": "front"},
		},
		{
			name: "kept by the invitation", podName: "web-1", keep: true,
			wantLabels: map[string]string{protocol.SourceNameLabel: "web-1", "app": "web", "tier": "front"},
		},
		{
			name: "never kept by a self target", podName: "web-1", self: true, keep: true,
			wantLabels: map[string]string{protocol.SourceNameLabel: "web-1", "label.multicluster.flotilla.dev/app": "web", "label.multicluster.flotilla.dev/tier": "front"},
			wantAnno:   map[string]string{"app": "web", "tier": "front"},
		},
		{
			name: "a name too long for a label value is hashed", podName: long,
			wantLabels: map[string]string{protocol.SourceNameLabel: protocol.SourceNameLabelValue(long), "label.multicluster.flotilla.dev/app": "web", "label.multicluster.flotilla.dev/tier": "front"},
			wantAnno:   map[string]string{"app": "web", "tier": "front"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := sourcePod(t)
			src.Name = tt.podName
			src.Labels["tier"] = "front"
			c, err := Build(src, "c1", "c2", src.Namespace, tt.self, tt.keep)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "c1", protocol.TargetLabel: protocol.TargetLabelValue("c2"), protocol.SourceUIDLabel: "uid-1"}
			maps.Copy(want, tt.wantLabels)
			if !maps.Equal(c.Labels, want) {
				t.Errorf("labels %v, want %v", c.Labels, want)
			}
			if v := c.Labels[protocol.SourceNameLabel]; len(v) > 63 || len(validation.IsValidLabelValue(v)) > 0 {
				t.Errorf("source-name label %q is no label value", v)
			}
			raw, ok := c.Annotations[protocol.SourceLabelsAnnotation]
			if (tt.wantAnno != nil) != ok {
				t.Fatalf("source-labels annotation %q, want %v", raw, tt.wantAnno)
			}
			got, err := SourceLabels(c)
			if err != nil {
				t.Fatal(err)
			}
			if wantSource := map[string]string{"app": "web", "tier": "front"}; !maps.Equal(got, wantSource) {
				t.Errorf("SourceLabels = %v, want %v", got, wantSource)
			}
		})
	}
}
