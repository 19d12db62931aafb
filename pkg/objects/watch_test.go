package objects

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func sourcePod(t *testing.T, spec corev1.PodSpec) *corev1.Pod {
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
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{name: "not a source pod", pod: &corev1.Pod{}, want: []string{}},
		{name: "nothing referenced", pod: sourcePod(t, corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}), want: []string{}},
		{
			name: "the source's token volume and its root CA are not the pod's",
			pod: sourcePod(t, corev1.PodSpec{
				Volumes:          []corev1.Volume{tokenVolume, {Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}},
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
			}),
			want: []string{"ConfigMap/cfg", "Secret/registry"},
		},
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
