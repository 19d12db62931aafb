package candidate

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
)

// referencingSpec names a ConfigMap or Secret in every place a pod spec
// can, each by a name of its own that starts "ref-".
func referencingSpec() corev1.PodSpec {
	ref := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }
	env := func(prefix string) ([]corev1.EnvVar, []corev1.EnvFromSource) {
		return []corev1.EnvVar{
				{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("ref-" + prefix + "-cm-key"), Key: "a"}}},
				{Name: "B", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("ref-" + prefix + "-secret-key"), Key: "b", Optional: ptr.To(true)}}},
				{Name: "PLAIN", Value: "ref-not-a-reference"},
			}, []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("ref-" + prefix + "-cm-from")}},
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref("ref-" + prefix + "-secret-from")}},
			}
	}
	initEnv, initFrom := env("init")
	appEnv, appFrom := env("app")
	debugEnv, debugFrom := env("debug")
	return corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("ref-vol-cm")}}},
			{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "ref-vol-secret"}}},
			{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("ref-proj-cm")}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: ref("ref-proj-secret")}},
				{DownwardAPI: &corev1.DownwardAPIProjection{}},
			}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		InitContainers:      []corev1.Container{{Name: "init", Image: "init:1", Env: initEnv, EnvFrom: initFrom}},
		Containers:          []corev1.Container{{Name: "app", Image: "app:1", Env: appEnv, EnvFrom: appFrom}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox", Env: debugEnv, EnvFrom: debugFrom}}},
		ImagePullSecrets:    []corev1.LocalObjectReference{ref("ref-pull"), ref("")},
	}
}

func referencingSource(t *testing.T) *corev1.Pod {
	t.Helper()
	src := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "uid-1"}}
	setSpec(t, src, referencingSpec())
	return src
}

// TestBuildReferencesCopies: a candidate that the target gets copies for
// names the copies, in every place; one beside its source pod names the
// objects themselves.
func TestBuildReferencesCopies(t *testing.T) {
	original := referencingSpec()
	var names []string
	VisitObjectReferences(&original, func(r ObjectReference) {
		if *r.Name != "" {
			names = append(names, *r.Name)
		}
	})
	// 4 volume references, 4 of each of 3 containers, 1 pull secret.
	if len(names) != 4+3*4+1 {
		t.Fatalf("VisitObjectReferences visits %d names: %v", len(names), names)
	}
	// A candidate has no ephemeral containers: they are added to a running
	// pod (kubectl debug), and no pod is created with them.
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, "ref-debug-") })
	for _, tc := range []struct {
		name      string
		self      bool
		namespace string
		copies    bool
	}{
		{"another cluster", false, "shop", true},
		{"another cluster, namespace mapped", false, "shop-eu", true},
		{"the source cluster, another namespace", true, "shop-eu", true},
		{"the source cluster, beside the source pod", true, "shop", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := referencingSource(t)
			before := src.DeepCopy()
			c, err := Build(src, "c1", "t1", tc.namespace, tc.self, false)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(c.Spec)
			if err != nil {
				t.Fatal(err)
			}
			got := string(raw)
			for _, n := range names {
				want := n
				if tc.copies {
					want = protocol.CopyName("c1", n)
				}
				if !strings.Contains(got, `"`+want+`"`) || tc.copies && strings.Contains(got, `"`+n+`"`) {
					t.Errorf("%s: the candidate's spec does not name %s alone: %s", n, want, got)
				}
			}
			if !strings.Contains(got, `"ref-not-a-reference"`) {
				t.Errorf("a value that names nothing was changed: %s", got)
			}
			if c.Spec.ImagePullSecrets[1].Name != "" {
				t.Errorf("an empty image pull secret became %q", c.Spec.ImagePullSecrets[1].Name)
			}
			// The source pod, which the agent's cache shares, and the
			// decoded fields are the source's: a second build starts from
			// them again.
			if !reflect.DeepEqual(src, before) {
				t.Error("Build changed the source pod")
			}
			spec, err := sourcespec.Original(src)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Spec.EphemeralContainers) > 0 {
				t.Errorf("the candidate has ephemeral containers: %+v", c.Spec.EphemeralContainers)
			}
			want := referencingSpec()
			want.EphemeralContainers = nil
			if !reflect.DeepEqual(spec, &want) {
				t.Errorf("Build changed the decoded saved spec:\n got %+v\nwant %+v", spec, want)
			}
		})
	}
}
