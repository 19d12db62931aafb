package objects

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
)

// sourcePod is a source pod whose candidates run spec, with original
// fields.
func sourcePod(t *testing.T, spec corev1.PodSpec) *corev1.Pod {
	t.Helper()
	raw, err := sourcespec.FieldsOf(&spec).Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{protocol.OriginalFieldsAnnotation: raw}}, Spec: spec}
}

// legacyPod is a source pod whose candidates run spec, admitted before
// original-fields: its spec saved whole.
func legacyPod(t *testing.T, spec corev1.PodSpec) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{protocol.SourceSpecAnnotation: string(raw)}}}
}

func TestIndexPod(t *testing.T) {
	tokenVolume := corev1.Volume{Name: "kube-api-access-x1y2z", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
	}}}}
	referencing := corev1.PodSpec{
		Volumes:          []corev1.Volume{tokenVolume, {Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
	}
	debugged := *referencing.DeepCopy()
	debugged.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug",
		EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "debugging"}}}}}}}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{name: "not a source pod", pod: &corev1.Pod{}, want: []string{}},
		{name: "nothing referenced", pod: sourcePod(t, corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}), want: []string{}},
		{
			name: "the source's token volume and its root CA are not the pod's",
			pod:  sourcePod(t, referencing),
			want: []string{"ConfigMap/cfg", "Secret/registry"},
		},
		// Added to the running source pod: no candidate runs it.
		{name: "an ephemeral container's", pod: sourcePod(t, debugged), want: []string{"ConfigMap/cfg", "Secret/registry"}},
		{name: "admitted before original-fields: nothing referenced", pod: legacyPod(t, corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}), want: []string{}},
		{name: "admitted before original-fields", pod: legacyPod(t, referencing), want: []string{"ConfigMap/cfg", "Secret/registry"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IndexPod(tc.pod); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("IndexPod = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTrimMetadataKeepsOnlyWhatTheWatcherReads(t *testing.T) {
	in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "shop", Name: "cfg", UID: "u", ResourceVersion: "7",
		Labels:      map[string]string{"a": "b"},
		Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"data":{"password":"hunter2"}}`},
	}}
	out, err := trimMetadata(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cfg", UID: "u", ResourceVersion: "7"}}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("trimMetadata = %+v, want %+v", out, want)
	}
}
