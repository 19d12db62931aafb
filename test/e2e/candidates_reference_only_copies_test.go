package e2e

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestCandidatesReferenceOnlyCopies acts as a malicious source: with the
// invited identity's own kubeconfig it creates candidates that name a
// Secret or ConfigMap the target's admin made in the invited namespace
// (a database password, a legacy token Secret of another ServiceAccount),
// in each place a pod can name one, and objects under names that are not
// its copies'. The invitation's admission policy refuses each, naming the
// field; a candidate naming the source's own copies, and the copies, pass.
// TestObjects places pods whose copies the source's agent makes.
func TestCandidatesReferenceOnlyCopies(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "tgt", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
	}})
	ctx := t.Context()
	tgt := s.Cluster("tgt")
	admin := tgt.Client()
	createNamespace(t, admin, placementNS)
	// What the invited namespace holds of the target's own.
	createSecret(t, admin, "db-password", map[string][]byte{"password": []byte("s3cret")})
	createConfigMap(t, admin, "settings", map[string]string{"dsn": "postgres://db"})
	if _, err := admin.CoreV1().ServiceAccounts(placementNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	legacy := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "deployer-token", Namespace: placementNS, Annotations: map[string]string{corev1.ServiceAccountNameKey: "deployer"}},
		Type:       corev1.SecretTypeServiceAccountToken,
	}
	if _, err := admin.CoreV1().Secrets(placementNS).Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.StartAgent(ctx, tgt, nil); err != nil {
		t.Fatal(err)
	}
	cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "src"}}
	cs.Spec.ClusterName = "src"
	cs.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	cs.Spec.Namespaces = []string{placementNS}
	invited := inviteReady(t, tgt, cs).client
	prefix := protocol.CopyNamePrefix("src")
	copyLabels := map[string]string{protocol.CopyLabel: "true", protocol.SourceClusterLabel: "src"}
	ref := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }

	// The source's own copies, and a candidate naming them in every
	// place, pass: the policy refuses names, not references.
	for _, name := range []string{"app-config", "app-secret"} {
		if _, err := invited.CoreV1().ConfigMaps(placementNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: protocol.CopyName("src", name), Labels: copyLabels}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the source's copy of ConfigMap %s is refused: %v", name, err)
		}
		if _, err := invited.CoreV1().Secrets(placementNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: protocol.CopyName("src", name), Labels: copyLabels}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the source's copy of Secret %s is refused: %v", name, err)
		}
	}
	// referencing is a candidate that names cm and secret in every place.
	referencing := func(podName, cm, secret string) *corev1.Pod {
		p := candidatePod(podName, "src")
		c := &p.Spec.Containers[0]
		p.Spec.Volumes = []corev1.Volume{
			{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref(cm)}}},
			{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}},
			{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref(cm)}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: ref(secret)}},
			}}}},
		}
		c.Env = []corev1.EnvVar{
			{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref(cm), Key: "a"}}},
			{Name: "B", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref(secret), Key: "b"}}},
		}
		c.EnvFrom = []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref(cm)}},
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref(secret)}},
		}
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{ref(secret)}
		return p
	}
	own := referencing("own", protocol.CopyName("src", "app-config"), protocol.CopyName("src", "app-secret"))
	if _, err := invited.CoreV1().Pods(placementNS).Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a candidate naming the source's copies is refused: %v", err)
	}

	// Each attack names one object the source did not copy; the rest of
	// the candidate names the source's copies.
	pod := func(name string, f func(p *corev1.Pod)) func() error {
		return func() error {
			p := referencing(name, protocol.CopyName("src", "app-config"), protocol.CopyName("src", "app-secret"))
			f(p)
			_, err := invited.CoreV1().Pods(placementNS).Create(ctx, p, metav1.CreateOptions{})
			return err
		}
	}
	for _, tc := range []struct {
		name, field string
		call        func() error
	}{
		{"mount the target's Secret", "spec.volumes[].secret.secretName", pod("mount", func(p *corev1.Pod) { p.Spec.Volumes[1].Secret.SecretName = "db-password" })},
		{"mount another ServiceAccount's legacy token", "spec.volumes[].secret.secretName", pod("legacy", func(p *corev1.Pod) { p.Spec.Volumes[1].Secret.SecretName = legacy.Name })},
		{"mount another source's copy", "spec.volumes[].secret.secretName", pod("other-source", func(p *corev1.Pod) {
			p.Spec.Volumes[1].Secret.SecretName = protocol.CopyName("other", "db-password")
		})},
		{"take its environment from the target's Secret", "spec.containers[].envFrom[].secretRef.name", pod("envfrom", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom[1].SecretRef.Name = "db-password"
		})},
		{"read a key of the target's Secret", "spec.containers[].env[].valueFrom.secretKeyRef.name", pod("keyref", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env[1].ValueFrom.SecretKeyRef.Name = "db-password"
		})},
		{"project the target's Secret", "spec.volumes[].projected.sources[].secret.name", pod("projected", func(p *corev1.Pod) {
			p.Spec.Volumes[2].Projected.Sources[1].Secret.Name = "db-password"
		})},
		{"pull with the target's Secret", "spec.imagePullSecrets[].name", pod("pull", func(p *corev1.Pod) { p.Spec.ImagePullSecrets[0].Name = "db-password" })},
		{"mount the target's ConfigMap", "spec.volumes[].configMap.name", pod("configmap", func(p *corev1.Pod) { p.Spec.Volumes[0].ConfigMap.Name = "settings" })},
		{"take its environment from the target's ConfigMap", "spec.containers[].envFrom[].configMapRef.name", pod("cm-envfrom", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name = "settings"
		})},
		{"create a ConfigMap under another name", "metadata.name", func() error {
			_, err := invited.CoreV1().ConfigMaps(placementNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings-2", Labels: copyLabels}}, metav1.CreateOptions{})
			return err
		}},
		{"create a Secret under another source's prefix", "metadata.name", func() error {
			_, err := invited.CoreV1().Secrets(placementNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: protocol.CopyName("other", "x"), Labels: copyLabels}}, metav1.CreateOptions{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("admitted")
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
				t.Fatalf("refused for another reason: %v", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "denied request: "+tc.field) || !strings.Contains(msg, "source src may only ") ||
				!strings.Contains(msg, "(names starting "+prefix+")") && !strings.Contains(msg, "(starting "+prefix+")") {
				t.Errorf("refused with %q, want the policy's message naming %s and the prefix %s", err, tc.field, prefix)
			}
		})
	}
	// Nothing of the target's own was changed on the way.
	got, err := admin.CoreV1().Secrets(placementNS).Get(ctx, "db-password", metav1.GetOptions{})
	if err != nil || string(got.Data["password"]) != "s3cret" || len(got.OwnerReferences) != 0 {
		t.Errorf("the target's Secret db-password: %+v, %v", got, err)
	}
}
