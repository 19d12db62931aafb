package invitation

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// ownCopies is in every message of referenceValidations.
const ownCopies = "may only reference its own copies"

// referencingCandidate is what candidate.Build makes for this cluster of
// a pod that names a ConfigMap or Secret in every place a pod can, as
// this API server's mutating admission leaves it.
func referencingCandidate(t *testing.T) *corev1.Pod {
	t.Helper()
	ref := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }
	c := func(name string) corev1.Container {
		return corev1.Container{
			Name: name, Image: "registry.example/" + name + ":1",
			Env: []corev1.EnvVar{
				{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref(name + "-cm"), Key: "a"}}},
				{Name: "B", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref(name + "-secret"), Key: "b"}}},
				{Name: "C", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			},
			EnvFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref(name + "-cm-env")}},
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref(name + "-secret-env"), Optional: ptr.To(true)}},
			},
		}
	}
	debug := c("debug")
	spec := corev1.PodSpec{
		Containers:          []corev1.Container{c("web")},
		InitContainers:      []corev1.Container{c("init")},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: debug.Name, Image: debug.Image, Env: debug.Env, EnvFrom: debug.EnvFrom}}},
		Volumes: []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("config")}}},
			{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls"}}},
			{Name: "bundle", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("ca")}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: ref("key")}},
			}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		ImagePullSecrets: []corev1.LocalObjectReference{ref("registry")},
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	source := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Namespace: "shop", UID: "uid-1",
		Annotations: map[string]string{protocol.SourceSpecAnnotation: string(raw)},
	}}
	p, err := candidate.Build(source, "c1", "t1", "shop", false, false)
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.ServiceAccountName = "default"
	p.Spec.Priority = ptr.To[int32](0)
	return p
}

// referenceRefusals are the refusals of referenceValidations among got.
func referenceRefusals(got []string) []string {
	var out []string
	for _, m := range got {
		if strings.Contains(m, ownCopies) || strings.HasPrefix(m, "metadata.name") || strings.HasPrefix(m, "error") {
			out = append(out, m)
		}
	}
	return out
}

// TestPolicyAdmitsReferencesToCopies: what candidate.Build makes, which
// names the source's copies, passes, and so do the copies themselves.
func TestPolicyAdmitsReferencesToCopies(t *testing.T) {
	e := compile(t, policyInvitation())
	p := referencingCandidate(t)
	if got := referenceRefusals(e.refusals(t, admission.Create, "pods", "", p, nil)); len(got) > 0 {
		t.Fatalf("a candidate naming the source's copies is refused: %q", got)
	}
	for _, resource := range []string{"configmaps", "secrets"} {
		if got := e.refusals(t, admission.Create, resource, "", copyNamed(resource, protocol.CopyName("c1", "config")), nil); len(got) > 0 {
			t.Errorf("a copy in %s is refused: %q", resource, got)
		}
	}
}

// copyNamed is a ConfigMap or Secret labelled as the source's copy.
func copyNamed(resource, name string) runtime.Object {
	meta := metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{protocol.CopyLabel: "true", protocol.SourceClusterLabel: "c1"}}
	if resource == "configmaps" {
		return &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"password": "x"}}
	}
	return &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("x")}}
}

// TestPolicyRefusesReferencesToOthersObjects names, in each place a pod
// can, an object the source did not copy: one of this cluster's, or
// another source's copy. Each is refused, with a message naming the
// field. The places are those candidate.VisitObjectReferences visits, so
// a place the source renames is a place the policy checks.
func TestPolicyRefusesReferencesToOthersObjects(t *testing.T) {
	e := compile(t, policyInvitation())
	sample := referencingCandidate(t)
	places := 0
	candidate.VisitObjectReferences(&sample.Spec, func(candidate.ObjectReference) { places++ })
	if places != 4+3*4+1 {
		t.Fatalf("the sample names objects in %d places, want every place", places)
	}
	for i := range places {
		for _, name := range []string{"db-password", protocol.CopyName("c2", "db-password"), "flotilla-" + strings.Repeat("0", 16) + "-x"} {
			p := referencingCandidate(t)
			var field string
			n := 0
			candidate.VisitObjectReferences(&p.Spec, func(r candidate.ObjectReference) {
				if n == i {
					field = string(r.Kind) + " " + *r.Name
					*r.Name = name
				}
				n++
			})
			got := e.refusals(t, admission.Create, "pods", "", p, nil)
			mine := referenceRefusals(got)
			if len(mine) != 1 || !strings.HasPrefix(mine[0], "spec.") || !strings.Contains(mine[0], "source c1 "+ownCopies+" (names starting "+protocol.CopyNamePrefix("c1")+")") {
				t.Errorf("%s named %s: refused with %q, want one message naming the field", field, name, got)
			}
		}
	}
	// The fields, by their messages.
	for _, tc := range []struct {
		name   string
		mutate func(p *corev1.Pod)
		field  string
	}{
		{"a Secret volume", func(p *corev1.Pod) { p.Spec.Volumes[1].Secret.SecretName = "db-password" }, "spec.volumes[].secret.secretName"},
		{"a ConfigMap volume", func(p *corev1.Pod) { p.Spec.Volumes[0].ConfigMap.Name = "kube-root-ca.crt" }, "spec.volumes[].configMap.name"},
		{"a projected Secret", func(p *corev1.Pod) { p.Spec.Volumes[2].Projected.Sources[2].Secret.Name = "db-password" }, "spec.volumes[].projected.sources[].secret.name"},
		{"a projected ConfigMap", func(p *corev1.Pod) { p.Spec.Volumes[2].Projected.Sources[1].ConfigMap.Name = "kube-root-ca.crt" }, "spec.volumes[].projected.sources[].configMap.name"},
		{"a secretKeyRef", func(p *corev1.Pod) { p.Spec.Containers[0].Env[1].ValueFrom.SecretKeyRef.Name = "db-password" }, "env[].valueFrom.secretKeyRef.name"},
		{"a configMapKeyRef of an init container", func(p *corev1.Pod) { p.Spec.InitContainers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name = "settings" }, "env[].valueFrom.configMapKeyRef.name"},
		{"envFrom a Secret of an ephemeral container", func(p *corev1.Pod) { p.Spec.EphemeralContainers[0].EnvFrom[1].SecretRef.Name = "db-password" }, "envFrom[].secretRef.name"},
		{"envFrom a ConfigMap", func(p *corev1.Pod) { p.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name = "settings" }, "envFrom[].configMapRef.name"},
		{"an image pull secret", func(p *corev1.Pod) { p.Spec.ImagePullSecrets[0].Name = "registry-admin" }, "spec.imagePullSecrets[].name"},
		{"a CSI volume's node publish Secret", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
				Driver: "secrets-store.csi.k8s.io", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "cloud-credentials"}}}})
		}, "spec.volumes[]: the Secret a volume plugin reads"},
		{"an azureFile volume's Secret", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "az", VolumeSource: corev1.VolumeSource{AzureFile: &corev1.AzureFileVolumeSource{
				SecretName: "storage-key", ShareName: "s"}}})
		}, "spec.volumes[]: the Secret a volume plugin reads"},
		{"a flexVolume's Secret", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "flex", VolumeSource: corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{
				Driver: "x/y", SecretRef: &corev1.LocalObjectReference{Name: "storage-key"}}}})
		}, "spec.volumes[]: the Secret a volume plugin reads"},
		{"a legacy token Secret, added", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "deployer-token-x7k2q"}}})
		}, "spec.volumes[].secret.secretName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := referencingCandidate(t)
			tc.mutate(p)
			got := referenceRefusals(e.refusals(t, admission.Create, "pods", "", p, nil))
			if len(got) != 1 || !strings.Contains(got[0], tc.field+":") && !strings.Contains(got[0], tc.field+" (") {
				t.Errorf("refused with %q, want one message naming %s", got, tc.field)
			}
		})
	}
	// A pod's references cannot change once it is created: its updates
	// are not checked again, so a candidate created before the rule
	// still gets its allowance.
	old := referencingCandidate(t)
	old.Spec.Volumes[1].Secret.SecretName = "tls"
	next := old.DeepCopy()
	next.Annotations[protocol.AllowedAnnotation] = "uid-1/1/n"
	if got := referenceRefusals(e.refusals(t, admission.Update, "pods", "", next, old)); len(got) > 0 {
		t.Errorf("an update of a candidate is refused: %q", got)
	}
}

// TestPolicyRefusesObjectsNamedOtherwise: the identity may create a
// ConfigMap or Secret only under its copies' prefix, so that what its
// candidates may reference is what it copied.
func TestPolicyRefusesObjectsNamedOtherwise(t *testing.T) {
	e := compile(t, policyInvitation())
	for _, resource := range []string{"configmaps", "secrets"} {
		for _, name := range []string{"db-password", protocol.CopyName("c2", "config"), "flotilla-config", strings.TrimSuffix(protocol.CopyNamePrefix("c1"), "-")} {
			got := e.refusals(t, admission.Create, resource, "", copyNamed(resource, name), nil)
			if len(got) != 1 || !strings.HasPrefix(got[0], "metadata.name: source c1 may only create ConfigMaps and Secrets named as its copies are (starting "+protocol.CopyNamePrefix("c1")+")") {
				t.Errorf("%s %s: refused with %q, want the metadata.name message", resource, name, got)
			}
		}
	}
}
