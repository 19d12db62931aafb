package e2e

import (
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const (
	tenantNS    = "tenant"
	neighbourNS = "neighbour"
	tenantUser  = "tenant-alice"
)

// TestTenantBorrowsNothing: a tenant with rights in one namespace of the
// source (its pods, Secrets and Targets) tries, through the chart's
// agent, to reach beyond it: a self Target into kube-system or a
// neighbour's namespace, kubeconfigs that would make the agent run a
// command or send its own token, a pod naming a Secret only a neighbour
// holds, a self Target whose drain would delete a neighbour's candidate.
// Each is refused with a reason and leaves nothing behind. Its own
// namespaced Target to another cluster places its namespace's pods, and
// none of another namespace.
func TestTenantBorrowsNothing(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
		{Name: "remote", Nodes: []sandbox.NodeSpec{{CPU: "16"}}},
	}})
	ctx := t.Context()
	src, remote := s.Cluster("src"), s.Cluster("remote")
	for _, ns := range []string{tenantNS, neighbourNS} {
		createNamespace(t, src.Client(), ns)
		createNamespace(t, remote.Client(), ns)
	}
	// The cluster admin's self ClusterTarget places every namespace's pods
	// at home; it lists no podCIDRs.
	// Tenants may name pod networks inside kwok's only.
	agent, err := sandbox.StartAgentWith(ctx, src, []*sandbox.Cluster{src}, sandbox.ReleaseOptions{
		Set: []string{"agent.tenantPodCIDRs={" + kwokPodCIDR + "}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	admin, remoteAdmin := src.Client(), remote.Client()
	tenantKube, tenantCR := tenantClients(t, src)

	if _, err := tenantKube.CoreV1().Pods("kube-system").Create(ctx, optedInPod("probe", "1"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant creating a pod in kube-system: %v, want Forbidden: the tenant has rights beyond its namespace", err)
	}

	remoteNode := protocol.VirtualNodeName(tenantNS, "remote")
	var neighbourWaiting, tenantRunning *corev1.Pod
	t.Run("its namespaced Target to another cluster places its pods, with their IPs, and no other namespace's", func(t *testing.T) {
		data, err := os.ReadFile(remote.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		createTenantSecret(t, tenantKube, "remote-kubeconfig", data)
		tg := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "remote"}}
		tg.Spec.KubeconfigSecretRef = &v1alpha1.LocalSecretKeyRef{Name: "remote-kubeconfig"}
		// A network wider than the admin lets tenants name: any address
		// the remote cluster reported would be this cluster's to route.
		tg.Spec.PodCIDRs = []string{"10.0.0.0/8"}
		if err := tenantCR.Create(ctx, tg); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitTarget(ctx, client.ObjectKeyFromObject(tg), 60*time.Second, func(st *v1alpha1.TargetStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonInvalidSpec &&
				strings.Contains(c.Message, "spec.podCIDRs[0] 10.0.0.0/8") && st.VirtualNode == ""
		}); err != nil {
			t.Fatalf("a tenant's Target naming pod networks beyond the admin's: %v", err)
		}
		if err := tenantCR.Get(ctx, client.ObjectKeyFromObject(tg), tg); err != nil {
			t.Fatal(err)
		}
		tg.Spec.PodCIDRs = []string{kwokPodCIDR}
		if err := tenantCR.Update(ctx, tg); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitTarget(ctx, client.ObjectKeyFromObject(tg), 60*time.Second, func(st *v1alpha1.TargetStatus) bool {
			return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady) && st.VirtualNode == remoteNode
		}); err != nil {
			t.Fatal(err)
		}
		// Only the remote cluster has room for it.
		own := createPodAs(t, tenantKube, tenantNS, optedInPod("tenant-app", "12"))
		bound := waitTenantPod(t, admin, own, "bound to the Target's node, Running, with its delegate's IP", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == remoteNode && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != ""
		})
		delegate := delegateOf(t, remoteAdmin, tenantNS, bound)
		if bound.Status.PodIP != delegate.Status.PodIP {
			t.Fatalf("source pod IP %q, delegate's %q", bound.Status.PodIP, delegate.Status.PodIP)
		}
		tenantRunning = bound

		// A neighbour's pod that only the remote cluster could hold waits
		// at home: the tenant's Target does not take it.
		neighbourWaiting = createPodAs(t, admin, neighbourNS, optedInPod("neighbour-big", "12"))
		waitFor(t, 60*time.Second, "the neighbour's candidate at home found no node", func() (bool, string) {
			c := candidatesOf(t, admin, neighbourNS, neighbourWaiting.UID)
			return len(c) == 1 && target.Unschedulable(&c[0]) != "", fmt.Sprintf("%d candidates at home", len(c))
		})
		if c := candidatesOf(t, remoteAdmin, "", neighbourWaiting.UID); len(c) != 0 {
			t.Fatalf("the tenant's Target took a pod of namespace %s: candidate %s/%s in the remote cluster", neighbourNS, c[0].Namespace, c[0].Name)
		}

		// Placed at home by the ClusterTarget, which lists no podCIDRs:
		// it runs, and shows no pod IP.
		small := createPodAs(t, admin, neighbourNS, optedInPod("neighbour-small", "1"))
		running := waitTenantPod(t, admin, small, "Running at home", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-src" && p.Status.Phase == corev1.PodRunning
		})
		if d := delegateOf(t, admin, neighbourNS, running); d.Status.PodIP == "" || running.Status.PodIP != "" || len(running.Status.PodIPs) != 0 {
			t.Fatalf("source pod IPs %q %v (delegate's %q): a target without podCIDRs must show none", running.Status.PodIP, running.Status.PodIPs, d.Status.PodIP)
		}
	})

	t.Run("a self Target into kube-system or a neighbour's namespace is refused, and nothing is created", func(t *testing.T) {
		for name, into := range map[string]string{"into-kube-system": "kube-system", "into-neighbour": neighbourNS} {
			tg := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: name}}
			tg.Spec.Self, tg.Spec.TargetNamespace = true, into
			if err := tenantCR.Create(ctx, tg); err != nil {
				t.Fatal(err)
			}
			waitRefused(t, src, tg, v1alpha1.ReasonInvalidSpec, "spec.targetNamespace")
		}
		probe := createPodAs(t, tenantKube, tenantNS, optedInPod("tenant-probe", "1"))
		waitTenantPod(t, admin, probe, "placed", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
		for _, ns := range []string{"kube-system", neighbourNS} {
			if c := candidatesOf(t, admin, ns, probe.UID); len(c) != 0 {
				t.Fatalf("a candidate of the tenant's pod in %s: %s", ns, c[0].Name)
			}
		}
		for _, name := range []string{"into-kube-system", "into-neighbour"} {
			node := protocol.VirtualNodeName(tenantNS, name)
			if _, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("virtual node %s of a refused Target: %v", node, err)
			}
		}
		// Its candidates share names with those of the self ClusterTarget
		// in the tenant's namespace (see docs/join-a-target.md, Overlapping targets).
		if err := tenantKube.CoreV1().Pods(tenantNS).Delete(ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("kubeconfigs that would run a command or send the agent's token are refused", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "pwned")
		exec := fmt.Sprintf("{exec: {apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never, command: /bin/touch, args: [%q]}}", marker)

		// A server of the tenant's, which the agent trusts by its CA.
		var authorized atomic.Int32
		spy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "" {
				authorized.Add(1)
			}
			http.NotFound(w, r)
		}))
		defer spy.Close()
		spyCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: spy.Certificate().Raw})
		spyCluster := fmt.Sprintf("{server: %q, certificate-authority-data: %q}", spy.URL, base64.StdEncoding.EncodeToString(spyCA))
		// The agent's own ServiceAccount token, where its pod has it
		// mounted (in the sandbox the agent runs as a process: the token
		// is put in a file it can read).
		token, err := admin.CoreV1().ServiceAccounts(sandbox.ReleaseNamespace).CreateToken(ctx, agentServiceAccount(t, admin),
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokenPath := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokenPath, []byte(token.Status.Token), 0o644); err != nil {
			t.Fatal(err)
		}

		for _, tc := range []struct {
			name, kubeconfig, reason string
		}{{
			name:   "exec",
			reason: v1alpha1.ReasonKubeconfigRefused,
			kubeconfig: "apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: [{name: x, context: {cluster: x, user: x}}]\n" +
				"clusters: [{name: x, cluster: " + spyCluster + "}]\nusers: [{name: x, user: " + exec + "}]\n",
		}, {
			name:   "agent-token-file",
			reason: v1alpha1.ReasonKubeconfigRefused,
			kubeconfig: "apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: [{name: x, context: {cluster: x, user: x}}]\n" +
				"clusters: [{name: x, cluster: " + spyCluster + "}]\nusers: [{name: x, user: {tokenFile: " + tokenPath + "}}]\n",
		}, {
			// client-go uses the context named "" (cluster "" and user "")
			// when current-context is empty, whatever other context there is.
			name:   "empty-current-context",
			reason: v1alpha1.ReasonKubeconfigRefused,
			kubeconfig: "apiVersion: v1\nkind: Config\ncurrent-context: ''\ncontexts: [{name: x, context: {cluster: x, user: x}}]\n" +
				"clusters: [{name: x, cluster: " + spyCluster + "}, {name: '', cluster: " + spyCluster + "}]\n" +
				"users: [{name: x, user: {token: harmless}}, {name: '', user: " + exec + "}]\n",
		}, {
			name:   "two-contexts-of-one-name",
			reason: v1alpha1.ReasonKubeconfigInvalid,
			kubeconfig: "apiVersion: v1\nkind: Config\ncurrent-context: x\n" +
				"contexts: [{name: x, context: {cluster: x, user: good}}, {name: x, context: {cluster: x, user: evil}}]\n" +
				"clusters: [{name: x, cluster: " + spyCluster + "}]\n" +
				"users: [{name: good, user: {token: harmless}}, {name: evil, user: " + exec + "}]\n",
		}} {
			t.Run(tc.name, func(t *testing.T) {
				createTenantSecret(t, tenantKube, "kc-"+tc.name, []byte(tc.kubeconfig))
				tg := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: tc.name}}
				tg.Spec.KubeconfigSecretRef = &v1alpha1.LocalSecretKeyRef{Name: "kc-" + tc.name}
				if err := tenantCR.Create(ctx, tg); err != nil {
					t.Fatal(err)
				}
				waitRefused(t, src, tg, tc.reason, "")
				if _, err := os.Stat(marker); err == nil {
					t.Fatal("the agent ran the exec plugin of a tenant's kubeconfig")
				}
				if n := authorized.Load(); n != 0 {
					t.Fatalf("the tenant's server got %d requests with an Authorization header", n)
				}
			})
		}
	})

	t.Run("a pod naming a Secret that only a neighbour holds gets no candidate and no copy", func(t *testing.T) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: neighbourNS, Name: "db-password"}, Data: map[string][]byte{"password": []byte("s3cret")}}
		if _, err := admin.CoreV1().Secrets(neighbourNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := optedInPod("tenant-steal", "1")
		pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret.Name}, Key: "password"},
		}}}
		steal := createPodAs(t, tenantKube, tenantNS, pod)
		waitTenantPod(t, admin, steal, "unscheduled with reason ObjectMissing", func(p *corev1.Pod) bool {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == "ObjectMissing" {
					return true
				}
			}
			return false
		})
		for name, c := range map[string]kubernetes.Interface{"src": admin, "remote": remoteAdmin} {
			if n := candidatesOf(t, c, "", steal.UID); len(n) != 0 {
				t.Fatalf("%s holds a candidate %s/%s of a pod naming a Secret its namespace does not have", name, n[0].Namespace, n[0].Name)
			}
			// Neither the Secret nor a copy of it (named as the source
			// names its copies).
			for _, secretName := range []string{secret.Name, protocol.CopyName("src", secret.Name)} {
				if _, err := c.CoreV1().Secrets(tenantNS).Get(ctx, secretName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Fatalf("%s has a Secret %s/%s: %v", name, tenantNS, secretName, err)
				}
			}
		}
	})

	t.Run("its self Target, deleted, drains nothing of another namespace", func(t *testing.T) {
		if neighbourWaiting == nil {
			t.Skip("no waiting candidate of the neighbour")
		}
		before := candidatesOf(t, admin, neighbourNS, neighbourWaiting.UID)
		if len(before) != 1 {
			t.Fatalf("%d candidates of the neighbour's waiting pod, want 1", len(before))
		}
		tg := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "home"}}
		tg.Spec.Self = true
		if err := tenantCR.Create(ctx, tg); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitTarget(ctx, client.ObjectKeyFromObject(tg), 60*time.Second, func(st *v1alpha1.TargetStatus) bool {
			return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady)
		}); err != nil {
			t.Fatal(err)
		}
		if err := tenantCR.Delete(ctx, tg); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the tenant's self Target drained and gone", func() (bool, string) {
			err := tenantCR.Get(ctx, client.ObjectKeyFromObject(tg), &v1alpha1.Target{})
			return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
		})
		after := candidatesOf(t, admin, neighbourNS, neighbourWaiting.UID)
		if len(after) != 1 || after[0].UID != before[0].UID {
			t.Fatalf("the neighbour's waiting candidate %s was deleted by the drain of the tenant's Target (now %d candidates)", before[0].UID, len(after))
		}
	})

	t.Run("its Target pointed to another namespace drains the old one first", func(t *testing.T) {
		if tenantRunning == nil {
			t.Skip("no pod of the tenant runs in the remote cluster")
		}
		const moved = "tenant-moved"
		createNamespace(t, remoteAdmin, moved)
		key := client.ObjectKey{Namespace: tenantNS, Name: "remote"}
		tg := &v1alpha1.Target{}
		if err := tenantCR.Get(ctx, key, tg); err != nil {
			t.Fatal(err)
		}
		tg.Spec.TargetNamespace = moved
		if err := tenantCR.Update(ctx, tg); err != nil {
			t.Fatal(err)
		}
		// Until the old place is empty, the pod that runs there stays
		// Running, mirrored from its delegate there: pointed at once to
		// the new namespace, the source would find no delegate, fail the
		// pod and leave its delegate running in the old one.
		stillRuns := func() string {
			p, err := admin.CoreV1().Pods(tenantNS).Get(ctx, tenantRunning.Name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName != remoteNode {
				t.Fatalf("the pod running in the old place is %s on %q after the Target moved", p.Status.Phase, p.Spec.NodeName)
			}
			if c := candidatesOf(t, remoteAdmin, tenantNS, p.UID); len(c) != 1 {
				t.Fatalf("%d delegates of the running pod in the old namespace", len(c))
			}
			return ""
		}
		if err := src.WaitTarget(ctx, key, 60*time.Second, func(st *v1alpha1.TargetStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
			stillRuns()
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonRepointing
		}); err != nil {
			t.Fatalf("the moved Target not reported draining its old place: %v", err)
		}
		// A pod only the remote cluster could hold gets no candidate there
		// while the old place drains, in either namespace.
		next := createPodAs(t, tenantKube, tenantNS, optedInPod("tenant-next", "12"))
		waitFor(t, 60*time.Second, "the next pod's candidate at home found no node", func() (bool, string) {
			stillRuns()
			c := candidatesOf(t, admin, tenantNS, next.UID)
			return len(c) == 1 && target.Unschedulable(&c[0]) != "", fmt.Sprintf("%d candidates at home", len(c))
		})
		if c := candidatesOf(t, remoteAdmin, "", next.UID); len(c) != 0 {
			t.Fatalf("a candidate %s/%s in the remote cluster while its Target drains its old place", c[0].Namespace, c[0].Name)
		}
		stillRuns()
		// The old pod ends: its delegate goes, and the Target takes pods
		// to the new namespace.
		if err := admin.CoreV1().Pods(tenantNS).Delete(ctx, tenantRunning.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitTenantPod(t, admin, next, "bound to the Target's node, Running, in the new namespace", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == remoteNode && p.Status.Phase == corev1.PodRunning
		})
		if c := candidatesOf(t, remoteAdmin, moved, next.UID); len(c) != 1 {
			t.Fatalf("%d delegates of the next pod in namespace %s", len(c), moved)
		}
		if c := candidatesOf(t, remoteAdmin, tenantNS, tenantRunning.UID); len(c) != 0 {
			t.Fatalf("the old pod's delegate is left in the old namespace")
		}
	})

	if !agent.Running() {
		t.Fatal("the agent exited")
	}
}

// tenantClients are clients of a user with a Role on pods, Secrets,
// Targets and PlacementPolicies of the tenant's namespace only (the
// admin impersonates it).
func tenantClients(t *testing.T, c *sandbox.Cluster) (kubernetes.Interface, client.Client) {
	t.Helper()
	ctx := t.Context()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "tenant"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "secrets", "configmaps"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"targets", "placementpolicies"}, Verbs: []string{"*"}},
		},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "tenant"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenantUser}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	}
	admin := c.Client()
	if _, err := admin.RbacV1().Roles(tenantNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(tenantNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(c.RESTConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: tenantUser}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	crCfg := rest.CopyConfig(cfg)
	crCfg.ContentType, crCfg.AcceptContentTypes = "application/json", "application/json"
	cr, err := client.New(crCfg, client.Options{Scheme: sandbox.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return kube, cr
}

func createTenantSecret(t *testing.T, c kubernetes.Interface, name string, kubeconfig []byte) {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: name}, Data: map[string][]byte{"kubeconfig": kubeconfig}}
	if _, err := c.CoreV1().Secrets(tenantNS).Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createPodAs(t *testing.T, c kubernetes.Interface, namespace string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := c.CoreV1().Pods(namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", namespace, pod.Name, err)
	}
	return created
}

// waitPod waits until the pod satisfies ok, and returns it.
func waitTenantPod(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	waitFor(t, 120*time.Second, fmt.Sprintf("pod %s/%s %s", pod.Namespace, pod.Name, what), func() (bool, string) {
		p, err := c.CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = p
		return ok(p), fmt.Sprintf("node %q, phase %q, podIP %q, conditions %v", p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, p.Status.Conditions)
	})
	return got
}

// candidatesOf lists the candidates of a source pod in a cluster's
// namespace ("" for all), those being deleted left out.
func candidatesOf(t *testing.T, c kubernetes.Interface, namespace string, uid types.UID) []corev1.Pod {
	t.Helper()
	list, err := c.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(uid)})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// delegateOf is the one candidate of a bound source pod.
func delegateOf(t *testing.T, c kubernetes.Interface, namespace string, source *corev1.Pod) *corev1.Pod {
	t.Helper()
	var d *corev1.Pod
	waitFor(t, 60*time.Second, "the one delegate of "+source.Name, func() (bool, string) {
		c := candidatesOf(t, c, namespace, source.UID)
		if len(c) != 1 || c[0].Spec.NodeName == "" {
			return false, fmt.Sprintf("%d candidates", len(c))
		}
		d = &c[0]
		return true, ""
	})
	return d
}

// waitRefused waits until a tenant's Target is not Ready for reason (its
// message holding word) and an Event on it says so.
func waitRefused(t *testing.T, src *sandbox.Cluster, tg *v1alpha1.Target, reason, word string) {
	t.Helper()
	if err := src.WaitTarget(t.Context(), client.ObjectKeyFromObject(tg), 30*time.Second, func(st *v1alpha1.TargetStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && strings.Contains(c.Message, word) && st.VirtualNode == ""
	}); err != nil {
		t.Fatal(err)
	}
	selector := fields.Set{"involvedObject.name": tg.Name, "reason": reason}.AsSelector().String()
	waitFor(t, 30*time.Second, fmt.Sprintf("a %s Event on Target %s", reason, tg.Name), func() (bool, string) {
		evs, err := src.Client().CoreV1().Events(tenantNS).List(t.Context(), metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		return len(evs.Items) > 0, fmt.Sprintf("%d events", len(evs.Items))
	})
}

// agentServiceAccount is the ServiceAccount the release's agent runs as.
func agentServiceAccount(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	deployments, err := c.AppsV1().Deployments(sandbox.ReleaseNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deployments.Items {
		if strings.Contains(d.Name, "agent") {
			return d.Spec.Template.Spec.ServiceAccountName
		}
	}
	t.Fatal("no agent Deployment in the release")
	return ""
}
