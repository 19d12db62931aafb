package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// profileMarker is the file a peer's exec plugin would create.
const profileMarker = "/tmp/flotilla-profile-pwned"

// TestClusterProfileTargets reaches a target through a ClusterProfile of
// the Cluster Inventory API (its published CRD, installed while the agent
// runs): a ClusterTarget naming a profile before the API exists says so;
// then the profile's access provider gives the server and CA, a Secret of
// the source the token, a pod runs there, and the virtual node carries the
// profile's labels and properties under the ClusterTarget's own, live.
// Profiles as an attacker would write them are refused and run nothing,
// and a deleted profile makes the target not Ready.
func TestClusterProfileTargets(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "spoke", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
	}})
	ctx := t.Context()
	src, spoke := s.Cluster("src"), s.Cluster("spoke")
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	_ = os.Remove(profileMarker)
	if _, err := sandbox.StartAgent(ctx, src, nil); err != nil {
		t.Fatal(err)
	}
	srcClient := src.Client()
	server, ca := serverOf(t, spoke.Kubeconfig)
	token := invitedToken(t, spoke)
	cl := src.CRClient()
	for _, name := range []string{"spoke", "plain-http", "proxy-exec", "insecure", "elsewhere"} {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sandbox.AgentNamespace}, Data: map[string][]byte{"token": []byte(token)}}
		if err := cl.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}
	profileTarget := func(t *testing.T, name string, allowed ...string) {
		t.Helper()
		ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name}}
		ct.Spec.ClusterProfileRef = &v1alpha1.ClusterProfileRef{Namespace: "fleet", Name: name, AllowedServers: allowed}
		ct.Spec.Labels = map[string]v1alpha1.LabelValue{"region": "eu-central", "tier": "gold"}
		if err := cl.Create(ctx, ct); err != nil {
			t.Fatal(err)
		}
	}
	waitReason := func(t *testing.T, name, reason, says string) {
		t.Helper()
		if err := src.WaitTarget(ctx, client.ObjectKey{Name: name}, 20*time.Second, func(st *v1alpha1.TargetStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && strings.Contains(c.Message, says)
		}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("without the ClusterProfile API the target says so", func(t *testing.T) {
		profileTarget(t, "spoke")
		waitReason(t, "spoke", v1alpha1.ReasonClusterProfileAPIMissing, "install the Cluster Inventory API")
	})

	installProfileCRD(t, src)
	cl = src.CRClient() // a client that knows the new kind
	createNamespace(t, srcClient, "fleet")
	// The secretreader convention: the exec plugin's cluster config names
	// the Secret; Flotilla runs no plugin and reads the Secret the
	// ClusterTarget names (by default the profile's name).
	secretreader := map[string]any{
		"server": server, "certificate-authority-data": ca,
		"extensions": []any{map[string]any{"name": "client.authentication.k8s.io/exec", "extension": map[string]any{"clusterName": "spoke"}}},
	}
	writeProfile(t, cl, "spoke", map[string]string{"region": "eu-west", "x-k8s.io/cluster-manager": "e2e"},
		[]any{map[string]any{"name": "secretreader", "cluster": secretreader}},
		[]any{
			map[string]any{"name": "topology.kubernetes.io/zone", "value": "eu-west-1a"},
			map[string]any{"name": "bad key!", "value": "x"},
		})

	t.Run("a profile's cluster takes pods and its node carries the profile's labels", func(t *testing.T) {
		if err := src.WaitTarget(ctx, client.ObjectKey{Name: "spoke"}, 30*time.Second, func(st *v1alpha1.TargetStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetCredentialsValid)
			return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady) && c != nil &&
				strings.Contains(c.Message, "ClusterProfile fleet/spoke") && strings.Contains(c.Message, `"bad key!"`)
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, optedInPod("via-profile", "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSourcePods(t, srcClient, "app=via-profile", 1, func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-spoke" && p.Status.Phase == corev1.PodRunning
		})
		waitNodeLabels(t, src, "flotilla-spoke", map[string]string{
			"topology.kubernetes.io/zone": "eu-west-1a", // a property
			"x-k8s.io/cluster-manager":    "e2e",        // a label of the profile
			"region":                      "eu-central", // the ClusterTarget's, over the profile's
			"tier":                        "gold",
		}, "bad key!")
	})

	t.Run("a changed profile changes the node's labels", func(t *testing.T) {
		writeProfile(t, cl, "spoke", map[string]string{"region": "eu-west", "x-k8s.io/cluster-manager": "e2e"},
			[]any{map[string]any{"name": "secretreader", "cluster": secretreader}},
			[]any{map[string]any{"name": "topology.kubernetes.io/zone", "value": "eu-west-1b"}})
		waitNodeLabels(t, src, "flotilla-spoke", map[string]string{"topology.kubernetes.io/zone": "eu-west-1b", "region": "eu-central"}, "")
	})

	t.Run("profiles as an attacker writes them are refused and run nothing", func(t *testing.T) {
		exec := []any{
			map[string]any{"name": "client.authentication.k8s.io/exec", "extension": map[string]any{"command": "/bin/touch", "args": []any{profileMarker}}},
			map[string]any{"name": "clusterprofiles.multicluster.x-k8s.io/exec/additional-envs", "extension": map[string]any{"LD_PRELOAD": profileMarker}},
		}
		for _, tc := range []struct {
			name    string
			cluster map[string]any
			allowed []string
			says    string
		}{
			{"plain-http", map[string]any{"server": strings.Replace(server, "https://", "http://", 1)}, nil, "not https"},
			{"proxy-exec", map[string]any{"server": server, "certificate-authority-data": ca, "proxy-url": "http://127.0.0.1:1", "extensions": exec}, nil, "proxy"},
			{"insecure", map[string]any{"server": server, "insecure-skip-tls-verify": true, "extensions": exec}, nil, "insecure-skip-tls-verify"},
			{"elsewhere", map[string]any{"server": strings.Replace(server, "127.0.0.1", "localhost", 1), "certificate-authority-data": ca}, []string{server}, "allowedServers"},
		} {
			writeProfile(t, cl, tc.name, nil, []any{map[string]any{"name": "secretreader", "cluster": tc.cluster}}, nil)
			profileTarget(t, tc.name, tc.allowed...)
			waitReason(t, tc.name, v1alpha1.ReasonClusterProfileRefused, tc.says)
			if _, err := srcClient.CoreV1().Nodes().Get(ctx, protocol.VirtualNodeName("", tc.name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s: a virtual node for a refused profile: %v", tc.name, err)
			}
		}
		if _, err := os.Stat(profileMarker); err == nil {
			t.Fatal("the agent ran an exec plugin a ClusterProfile named")
		}
	})

	t.Run("a deleted profile makes the target not Ready", func(t *testing.T) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("multicluster.x-k8s.io/v1alpha1")
		u.SetKind("ClusterProfile")
		u.SetNamespace("fleet")
		u.SetName("spoke")
		if err := cl.Delete(ctx, u); err != nil {
			t.Fatal(err)
		}
		waitReason(t, "spoke", v1alpha1.ReasonClusterProfileNotFound, "fleet/spoke")
	})
}

// serverOf is the server and CA (base64) of a kubeconfig's current context.
func serverOf(t *testing.T, path string) (server, ca string) {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cluster := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
	return cluster.Server, caDataOf(t, path)
}

// invitedToken is a token of a ServiceAccount of c that may do everything,
// as a cluster manager would hand a consumer.
func invitedToken(t *testing.T, c *sandbox.Cluster) string {
	t.Helper()
	ctx := t.Context()
	kube := c.Client()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fleet-consumer", Namespace: "default"}}
	if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-consumer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// installProfileCRD installs the ClusterProfile CRD as the Cluster
// Inventory API publishes it (testdata/clusterprofile) and waits until it
// is served.
func installProfileCRD(t *testing.T, c *sandbox.Cluster) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "clusterprofile", "multicluster.x-k8s.io_clusterprofiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(string(data), "---\n")), crd); err != nil {
		t.Fatal(err)
	}
	cs, err := apiextensionsclient.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := api.Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the ClusterProfile CRD established", func() (bool, string) {
		got, err := api.Get(t.Context(), crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", got.Status.Conditions)
	})
}

// writeProfile creates or replaces ClusterProfile fleet/name as a cluster
// manager writes it: labels, then the status (access providers and
// properties) through the status subresource.
func writeProfile(t *testing.T, cl client.Client, name string, labels map[string]string, providers, properties []any) {
	t.Helper()
	ctx := t.Context()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("multicluster.x-k8s.io/v1alpha1")
	u.SetKind("ClusterProfile")
	err := cl.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: name}, u)
	switch {
	case apierrors.IsNotFound(err):
		u.SetNamespace("fleet")
		u.SetName(name)
		u.SetLabels(labels)
		u.Object["spec"] = map[string]any{"clusterManager": map[string]any{"name": "e2e"}}
		if err := cl.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	case err != nil:
		t.Fatal(err)
	default:
		u.SetLabels(labels)
		if err := cl.Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	status := map[string]any{"accessProviders": providers}
	if properties != nil {
		status["properties"] = properties
	}
	u.Object["status"] = status
	if err := cl.Status().Update(ctx, u); err != nil {
		t.Fatal(err)
	}
}

// waitNodeLabels waits until node carries want (and not the label absent).
func waitNodeLabels(t *testing.T, c *sandbox.Cluster, node string, want map[string]string, absent string) {
	t.Helper()
	kube := c.Client()
	waitFor(t, 30*time.Second, "the labels of "+node, func() (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for k, v := range want {
			if n.Labels[k] != v {
				return false, fmt.Sprintf("labels %v", n.Labels)
			}
		}
		if _, ok := n.Labels[absent]; absent != "" && ok {
			return false, fmt.Sprintf("labels %v", n.Labels)
		}
		return true, ""
	})
}
