package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestMigrateAdmiralty installs Admiralty's CRDs beside Flotilla's in one
// cluster, writes the objects an Admiralty user has (targets with
// kubeconfig Secrets, one of which runs an exec plugin, a field Admiralty's
// schema prunes, invitations, an opted-in namespace, Deployment and pod),
// and runs the built plugin's migrate admiralty: the review changes
// nothing, --apply creates Flotilla objects that the API server accepts, a
// second --apply changes nothing, and Admiralty's objects are untouched.
func TestMigrateAdmiralty(t *testing.T) {
	t.Parallel()
	plugin := buildPlugin(t)
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "c1", WithoutScheduler: true}}})
	c1 := s.Cluster("c1")
	ctx := t.Context()
	kube, cl := c1.Client(), c1.CRClient()
	installAdmiraltyCRDs(t, c1)

	for _, ns := range []string{"admiralty", sandbox.AgentNamespace, "shop"} {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if ns == "shop" {
			n.Labels = map[string]string{"multicluster-scheduler": "enabled"}
		}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	good := `apiVersion: v1
kind: Config
current-context: c2
contexts:
- {name: c2, context: {cluster: c2, user: c2}}
clusters:
- {name: c2, cluster: {server: "https://c2.example.com:6443", certificate-authority-data: Zm9v}}
users:
- {name: c2, user: {token: admiralty-token}}
`
	execKubeconfig := strings.Replace(good, "{token: admiralty-token}", "{exec: {apiVersion: client.authentication.k8s.io/v1, command: aws, args: [eks, get-token]}}", 1)
	for _, sec := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "admiralty", Name: "c2"}, StringData: map[string]string{"config": good}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "admiralty", Name: "eks"}, StringData: map[string]string{"config": execKubeconfig}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "c2"}, StringData: map[string]string{"config": good}},
	} {
		if _, err := kube.CoreV1().Secrets(sec.Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	admiralty := []string{
		"kind: ClusterTarget\nmetadata: {name: c1}\nspec: {self: true}",
		"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty}, excludedLabelsRegexp: '^kubernetes\\.azure\\.com/', nodeSelector: {zone: a}}",
		"kind: ClusterTarget\nmetadata: {name: eks}\nspec: {kubeconfigSecret: {name: eks, namespace: admiralty}}",
		"kind: Target\nmetadata: {name: c2, namespace: shop}\nspec: {kubeconfigSecret: {name: c2}}",
		"kind: Source\nmetadata: {name: c3, namespace: shop}\nspec: {serviceAccountName: c3}",
		"kind: ClusterSource\nmetadata: {name: c4}\nspec: {serviceAccount: {name: c4, namespace: admiralty}}",
	}
	for _, text := range admiralty {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte("apiVersion: multicluster.admiralty.io/v1alpha1\n"+text), &u.Object); err != nil {
			t.Fatal(err)
		}
		// As kubectl create --validate=false would: Admiralty's schema
		// prunes the field it does not know.
		if err := cl.Create(ctx, u); err != nil {
			t.Fatalf("creating Admiralty %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	elect := map[string]string{"multicluster.admiralty.io/elect": "", "multicluster.admiralty.io/no-reservation": ""}
	labels := map[string]string{"app": "web"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: elect},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
			},
		},
	}
	if _, err := kube.AppsV1().Deployments("shop").Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "once", Annotations: map[string]string{"multicluster.admiralty.io/elect": ""}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := kube.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := admiraltySnapshot(t, c1)

	migrate := func(args ...string) cliResult {
		return runPlugin(t, plugin, append([]string{"--kubeconfig", c1.Kubeconfig, "migrate", "admiralty", "--agent-namespace", sandbox.AgentNamespace}, args...)...)
	}

	t.Run("the review prints Flotilla's objects and what could not be mapped, and changes nothing", func(t *testing.T) {
		r := migrate()
		r.mustSucceed(t)
		for _, want := range []string{"kind: ClusterTarget\nmetadata:\n  labels:\n    app.kubernetes.io/managed-by: kubectl-flotilla\n  name: c1\nspec:\n  self: true",
			"name: flotilla-target-c2\n    namespace: " + sandbox.AgentNamespace, "kind: Target", "kind: Source", "# Secret shop/flotilla-target-c2"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("the YAML lacks %q:\n%s", want, r.stdout)
			}
		}
		if strings.Contains(r.stdout, "admiralty-token") || strings.Contains(r.stdout, "name: eks") || strings.Contains(r.stdout, "kind: ClusterSource") {
			t.Errorf("the YAML shows a credential, the refused target or the ClusterSource without namespaces:\n%s", r.stdout)
		}
		for _, want := range []string{
			"Admiralty ClusterTarget eks: not migrated", "exec plugins run commands", "kubectl flotilla join eks --kubeconfig-from",
			"spec.excludedLabelsRegexp has no equivalent",
			"Admiralty ClusterSource c4: not migrated", "--namespaces or --namespace-selector",
			"kubectl label namespace shop multicluster-scheduler- multicluster.flotilla.dev/enabled=true",
			`kubectl -n shop patch deployment web --type merge`, "multicluster.admiralty.io/no-reservation: Flotilla has no equivalent",
			"pod shop/once", "Nothing was changed",
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("the report lacks %q:\n%s", want, r.stderr)
			}
		}
		if strings.Contains(r.stderr, "spec.nodeSelector") {
			t.Errorf("Admiralty's schema prunes spec.nodeSelector, yet the report names it:\n%s", r.stderr)
		}
		err := cl.Get(ctx, client.ObjectKey{Name: "c1"}, &v1alpha1.ClusterTarget{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("the review created ClusterTarget c1 (or could not tell): %v", err)
		}
	})

	t.Run("apply creates what the review printed", func(t *testing.T) {
		r := migrate("--apply", "--namespaces", "shop")
		r.mustSucceed(t)
		t.Logf("%s", r.stdout)
		for _, want := range []string{
			"Secret " + sandbox.AgentNamespace + "/flotilla-target-c2: created", "Secret shop/flotilla-target-c2: created",
			"ClusterTarget c1: created", "ClusterTarget c2: created", "Target shop/c2: created",
			"ClusterSource c4: created", "Source shop/c3: created",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("apply's report lacks %q:\n%s", want, r.stdout)
			}
		}
		if strings.Contains(r.stdout, "eks") {
			t.Errorf("apply wrote something of the refused target:\n%s", r.stdout)
		}
		ct := &v1alpha1.ClusterTarget{}
		if err := cl.Get(ctx, client.ObjectKey{Name: "c2"}, ct); err != nil {
			t.Fatal(err)
		}
		if ref := ct.Spec.KubeconfigSecretRef; ref == nil || ref.Name != "flotilla-target-c2" || ref.Namespace != sandbox.AgentNamespace || ct.Spec.Self {
			t.Errorf("ClusterTarget c2: %+v", ct.Spec)
		}
		secret, err := kube.CoreV1().Secrets(sandbox.AgentNamespace).Get(ctx, "flotilla-target-c2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cfg, err := kubeconfig.RESTConfig(secret.Data["kubeconfig"]); err != nil || cfg.BearerToken != "admiralty-token" || cfg.Host != "https://c2.example.com:6443" {
			t.Errorf("the copied kubeconfig: %v %+v", err, cfg)
		}
		if err := cl.Get(ctx, client.ObjectKey{Name: "eks"}, &v1alpha1.ClusterTarget{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterTarget eks, whose kubeconfig runs a command: %v", err)
		}
		cs := &v1alpha1.ClusterSource{}
		if err := cl.Get(ctx, client.ObjectKey{Name: "c4"}, cs); err != nil {
			t.Fatal(err)
		}
		if sa := cs.Spec.Identity.ServiceAccount; sa == nil || sa.Name != "c4" || sa.Namespace != "admiralty" || cs.Spec.ClusterName != "c4" || strings.Join(cs.Spec.Namespaces, ",") != "shop" {
			t.Errorf("ClusterSource c4: %+v", cs.Spec)
		}
		src := &v1alpha1.Source{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "c3"}, src); err != nil {
			t.Fatal(err)
		}
		if sa := src.Spec.Identity.ServiceAccount; sa == nil || sa.Name != "c3" || sa.Namespace != "shop" || src.Spec.ClusterName != "c3" {
			t.Errorf("Source shop/c3: %+v", src.Spec)
		}
	})

	t.Run("apply again changes nothing", func(t *testing.T) {
		r := migrate("--apply", "--namespaces", "shop")
		r.mustSucceed(t)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 7 {
			t.Errorf("want 7 objects reported, got:\n%s", r.stdout)
		}
		for _, l := range lines {
			if !strings.HasSuffix(l, ": unchanged") || strings.HasPrefix(l, " ") {
				t.Errorf("a second apply did something: %q", l)
			}
		}
	})

	t.Run("Admiralty's objects are untouched", func(t *testing.T) {
		after := admiraltySnapshot(t, c1)
		for k, v := range before {
			if after[k] != v {
				t.Errorf("%s changed: resourceVersion %s, was %s", k, after[k], v)
			}
		}
		if len(after) != len(before) {
			t.Errorf("%d of Admiralty's objects before, %d after", len(before), len(after))
		}
	})

	t.Run("the printed commands move the namespace and the Deployment over", func(t *testing.T) {
		r := migrate()
		r.mustSucceed(t)
		var ran int
		for _, line := range strings.Split(r.stderr, "\n") {
			command, ok := strings.CutPrefix(strings.TrimSpace(line), "run:  ")
			if !ok || !(strings.HasPrefix(command, "kubectl label namespace shop ") || strings.HasPrefix(command, "kubectl -n shop patch deployment web ")) {
				continue
			}
			// As a user pastes it into a shell, with kubectl 1.35.
			sh := exec.CommandContext(ctx, "bash", "-c", command)
			sh.Env = append(os.Environ(), "PATH="+c1.BinDir()+":"+os.Getenv("PATH"), "KUBECONFIG="+c1.Kubeconfig)
			if out, err := sh.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", command, err, out)
			}
			ran++
		}
		if ran != 2 {
			t.Fatalf("ran %d of the namespace's and the Deployment's commands, want 2:\n%s", ran, r.stderr)
		}
		ns, err := kube.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, admiralty := ns.Labels["multicluster-scheduler"]; admiralty || ns.Labels["multicluster.flotilla.dev/enabled"] != "true" {
			t.Errorf("namespace shop's labels: %v", ns.Labels)
		}
		d, err := kube.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tpl := d.Spec.Template.ObjectMeta
		if _, admiralty := tpl.Annotations["multicluster.admiralty.io/elect"]; admiralty || tpl.Labels["multicluster.flotilla.dev/elect"] != "true" || tpl.Labels["app"] != "web" {
			t.Errorf("Deployment shop/web's template: labels %v, annotations %v", tpl.Labels, tpl.Annotations)
		}
		after := migrate()
		after.mustSucceed(t)
		if strings.Contains(after.stderr, "namespace shop:") || strings.Contains(after.stderr, "deployment shop/web") {
			t.Errorf("moved over, yet still reported:\n%s", after.stderr)
		}
	})

	t.Run("mistakes exit 2", func(t *testing.T) {
		if r := migrate("--namespaces", "a", "--namespace-selector", "b=c"); r.code != 2 || !strings.Contains(r.stderr, "exclude each other") {
			t.Errorf("%s", r)
		}
	})
}

// installAdmiraltyCRDs installs testdata/admiralty/crds.yaml and waits
// until the API server serves it.
func installAdmiraltyCRDs(t *testing.T, c *sandbox.Cluster) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "admiralty", "crds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cs, err := apiextensionsclient.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var names []string
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := dec.Decode(crd); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if crd.Name == "" {
			continue
		}
		if _, err := api.Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, crd.Name)
	}
	if len(names) != 4 {
		t.Fatalf("want Admiralty's 4 CRDs, read %v", names)
	}
	waitFor(t, 30*time.Second, "Admiralty's CRDs established", func() (bool, string) {
		for _, n := range names {
			got, err := api.Get(t.Context(), n, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			established := false
			for _, cond := range got.Status.Conditions {
				established = established || (cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue)
			}
			if !established {
				return false, n + " not established"
			}
		}
		return true, ""
	})
}

// admiraltySnapshot is the resourceVersion of every Admiralty object, of
// the Secrets they name, of the opted-in namespace and of the workloads.
func admiraltySnapshot(t *testing.T, c *sandbox.Cluster) map[string]string {
	t.Helper()
	ctx := t.Context()
	out := map[string]string{}
	cl := c.CRClient()
	for _, kind := range []string{"Target", "ClusterTarget", "Source", "ClusterSource"} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("multicluster.admiralty.io/v1alpha1")
		list.SetKind(kind + "List")
		if err := cl.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		for _, u := range list.Items {
			out[fmt.Sprintf("%s %s/%s", kind, u.GetNamespace(), u.GetName())] = u.GetResourceVersion()
		}
	}
	kube := c.Client()
	for _, ref := range []string{"admiralty/c2", "admiralty/eks", "shop/c2"} {
		ns, name, _ := strings.Cut(ref, "/")
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out["Secret "+ref] = s.ResourceVersion
	}
	ns, err := kube.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out["Namespace shop"] = ns.ResourceVersion
	d, err := kube.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out["Deployment shop/web generation"] = fmt.Sprint(d.Generation)
	return out
}
