package objects

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestOf(t *testing.T) {
	cmRef := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }
	tests := []struct {
		name string
		spec corev1.PodSpec
		want []Ref
	}{
		{name: "nothing", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}},
		{
			name: "volumes",
			spec: corev1.PodSpec{Volumes: []corev1.Volume{
				{Name: "a", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: cmRef("cm")}}},
				{Name: "b", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", Optional: ptr.To(true)}}},
				{Name: "c", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			}},
			want: []Ref{{Kind: ConfigMap, Name: "cm"}, {Kind: Secret, Name: "s", Optional: true}},
		},
		{
			name: "projected sources",
			spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: cmRef("pcm"), Optional: ptr.To(true)}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: cmRef("ps")}},
				{DownwardAPI: &corev1.DownwardAPIProjection{}},
			}}}}}},
			want: []Ref{{Kind: ConfigMap, Name: "pcm", Optional: true}, {Kind: Secret, Name: "ps"}},
		},
		{
			name: "env and envFrom of init, regular and ephemeral containers",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "init", Env: []corev1.EnvVar{
					{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: cmRef("init-cm"), Key: "a"}}},
					{Name: "PLAIN", Value: "x"},
					{Name: "FIELD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				}}},
				Containers: []corev1.Container{{Name: "app",
					Env: []corev1.EnvVar{{Name: "B", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: cmRef("app-s"), Key: "b", Optional: ptr.To(true)}}}},
					EnvFrom: []corev1.EnvFromSource{
						{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: cmRef("app-cm")}},
						{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: cmRef("app-env-s"), Optional: ptr.To(false)}},
					},
				}},
				EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug",
					EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: cmRef("debug-s"), Optional: ptr.To(true)}}},
				}}},
			},
			want: []Ref{
				{Kind: ConfigMap, Name: "app-cm"}, {Kind: ConfigMap, Name: "init-cm"},
				{Kind: Secret, Name: "app-env-s"}, {Kind: Secret, Name: "app-s", Optional: true}, {Kind: Secret, Name: "debug-s", Optional: true},
			},
		},
		{
			name: "image pull secrets are optional: the kubelet pulls without a missing one",
			spec: corev1.PodSpec{ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}, {Name: ""}}},
			want: []Ref{{Kind: Secret, Name: "registry", Optional: true}},
		},
		{
			name: "one required reference makes an object required, whatever the others say",
			spec: corev1.PodSpec{
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: "s"}},
				Volumes: []corev1.Volume{
					{Name: "a", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", Optional: ptr.To(true)}}},
					{Name: "b", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: cmRef("cm"), Optional: ptr.To(true)}}},
				},
				Containers: []corev1.Container{{Name: "app", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: cmRef("s")}}}}},
			},
			want: []Ref{{Kind: ConfigMap, Name: "cm", Optional: true}, {Kind: Secret, Name: "s"}},
		},
		{
			name: "a ConfigMap and a Secret of the same name are two objects",
			spec: corev1.PodSpec{Volumes: []corev1.Volume{
				{Name: "a", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "same"}}},
				{Name: "b", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: cmRef("same")}}},
			}},
			want: []Ref{{Kind: ConfigMap, Name: "same"}, {Kind: Secret, Name: "same"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Of(&tc.spec)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Of:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
