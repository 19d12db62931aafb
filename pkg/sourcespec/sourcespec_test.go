package sourcespec

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// admitted is the spec of a pod as the cluster's admission lets it in,
// before the webhook: the default scheduler and tolerations, and the
// ServiceAccount plugin's token.
func admitted() corev1.PodSpec {
	token := "kube-api-access-x1y2z"
	return corev1.PodSpec{
		SchedulerName: corev1.DefaultSchedulerName,
		Containers: []corev1.Container{{Name: "app", Image: "app:1",
			VolumeMounts: []corev1.VolumeMount{{Name: token, MountPath: "/var/run/secrets"}, {Name: "data", MountPath: "/data"}}}},
		Volumes: []corev1.Volume{
			{Name: token, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			{Key: "gpu", Operator: corev1.TolerationOpExists},
		},
	}
}

// withoutToken is admitted() as its candidates run it.
func withoutToken() corev1.PodSpec {
	s := admitted()
	s.Volumes = s.Volumes[1:]
	s.Containers[0].VolumeMounts = s.Containers[0].VolumeMounts[1:]
	return s
}

// sourcePod is the source pod the webhook makes of admitted(), bound to a
// virtual node, with an ephemeral container added since.
func sourcePod(t *testing.T) *corev1.Pod {
	t.Helper()
	spec := admitted()
	raw, err := FieldsOf(&spec).Encode()
	if err != nil {
		t.Fatal(err)
	}
	spec.SchedulerName = protocol.SourceSchedulerName
	spec.Tolerations = []corev1.Toleration{{Key: protocol.VirtualNodeTaintKey, Operator: corev1.TolerationOpExists}, {Key: "gpu", Operator: corev1.TolerationOpExists}}
	spec.NodeName = "flotilla-t1"
	spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Annotations: map[string]string{protocol.OriginalFieldsAnnotation: raw}},
		Spec:       spec,
	}
}

// legacyPod is a source pod of admitted() as agents before original-fields
// made one: the whole spec saved, token and all.
func legacyPod(t *testing.T) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(admitted())
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Annotations: map[string]string{protocol.SourceSpecAnnotation: string(raw)}},
		Spec:       corev1.PodSpec{SchedulerName: protocol.SourceSchedulerName, NodeName: "flotilla-t1"},
	}
}

// TestOriginal: the candidates of a source pod run the pod's spec with the
// fields the webhook changed as they were, without the source's token, a
// node or ephemeral containers; those of a pod admitted before
// original-fields run its saved spec the same way. The pod itself, which
// the agent's cache shares, never changes.
func TestOriginal(t *testing.T) {
	for name, pod := range map[string]*corev1.Pod{"original fields": sourcePod(t), "saved spec": legacyPod(t)} {
		t.Run(name, func(t *testing.T) {
			before := pod.DeepCopy()
			got, err := Original(pod)
			if err != nil {
				t.Fatal(err)
			}
			if want := withoutToken(); !equality.Semantic.DeepEqual(*got, want) {
				t.Errorf("candidates run\n%+v\nwant\n%+v", *got, want)
			}
			// The caller's to change.
			got.Containers[0].Image = "changed"
			got.Tolerations[0].Key = "changed"
			got.Volumes[0].Name = "changed"
			if !equality.Semantic.DeepEqual(pod, before) {
				t.Errorf("a caller's change reached the pod:\n%+v", pod.Spec)
			}
			again, err := Original(pod)
			if err != nil {
				t.Fatal(err)
			}
			if want := withoutToken(); !equality.Semantic.DeepEqual(*again, want) {
				t.Errorf("a caller's change reached another caller: %+v", *again)
			}
			if !Saved(pod) {
				t.Error("Saved: false")
			}
		})
	}
}

// TestOriginalRefuses: a pod the webhook did not admit, or whose
// annotation is not what the webhook writes, has no spec to run.
func TestOriginalRefuses(t *testing.T) {
	for name, annotations := range map[string]map[string]string{
		"neither":                           nil,
		"original fields that are no JSON":  {protocol.OriginalFieldsAnnotation: "{not json"},
		"original fields of the wrong type": {protocol.OriginalFieldsAnnotation: `{"tolerations":"all"}`},
		"a saved spec that is no spec":      {protocol.SourceSpecAnnotation: `{"containers": 1}`},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}
		if _, err := Original(pod); err == nil {
			t.Errorf("%s: a spec to run", name)
		}
	}
	if Saved(&corev1.Pod{}) {
		t.Error("Saved: true of a pod without either annotation")
	}
}
