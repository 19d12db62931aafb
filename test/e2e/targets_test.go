package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestLiveTargets adds, breaks and removes targets of a running agent: no
// process restarts in between.
func TestLiveTargets(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "t1", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
		{Name: "t2", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
	}})
	ctx := t.Context()
	src, t1, t2 := s.Cluster("src"), s.Cluster("t1"), s.Cluster("t2")
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	// An agent with no target at all.
	agent, err := sandbox.StartAgent(ctx, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	srcClient := src.Client()
	cl := src.CRClient()

	t.Run("a target created at runtime gets candidates", func(t *testing.T) {
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, optedInPod("early", "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := src.AddTarget(ctx, t1); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitTargetReady(ctx, "t1", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		// The pod created before the target existed is placed too.
		waitSourcePods(t, srcClient, "app=early", 1, func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-t1" && p.Status.Phase == corev1.PodRunning
		})
	})

	t.Run("a target with a wrong CA is reported within 10s and the others keep scheduling", func(t *testing.T) {
		data, err := os.ReadFile(t2.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		// t1's CA does not sign t2's serving certificate.
		wrong := strings.Replace(string(data), caDataOf(t, t2.Kubeconfig), caDataOf(t, t1.Kubeconfig), 1)
		if err := cl.Create(ctx, sandbox.KubeconfigSecret("wrong-ca", []byte(wrong))); err != nil {
			t.Fatal(err)
		}
		createClusterTarget(t, cl, "wrong-ca", "wrong-ca")
		start := time.Now()
		if err := src.WaitTarget(ctx, client.ObjectKey{Name: "wrong-ca"}, 10*time.Second, func(st *v1alpha1.TargetStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonUnreachable && strings.Contains(c.Message, "certificate")
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrong CA reported after %s", time.Since(start).Round(time.Millisecond))
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, optedInPod("beside-broken", "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSourcePods(t, srcClient, "app=beside-broken", 1, func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-t1" && p.Status.Phase == corev1.PodRunning
		})
	})

	t.Run("a fixed Secret takes effect without a restart", func(t *testing.T) {
		data, err := os.ReadFile(t2.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		secret := sandbox.KubeconfigSecret("wrong-ca", data)
		if err := cl.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitTarget(ctx, client.ObjectKey{Name: "wrong-ca"}, 20*time.Second, func(st *v1alpha1.TargetStatus) bool {
			return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady) && st.VirtualNode == "flotilla-wrong-ca"
		}); err != nil {
			t.Fatal(err)
		}
		// Back out: the next subtests want t2 unused.
		if err := cl.Delete(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "wrong-ca"}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "target wrong-ca and its node removed", func() (bool, string) {
			err := cl.Get(ctx, client.ObjectKey{Name: "wrong-ca"}, &v1alpha1.ClusterTarget{})
			if !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("ClusterTarget: %v", err)
			}
			_, err = srcClient.CoreV1().Nodes().Get(ctx, "flotilla-wrong-ca", metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprintf("node: %v", err)
		})
	})

	t.Run("kubeconfigs that are garbled, run commands or read files are refused", func(t *testing.T) {
		for name, kubeconfig := range map[string]string{
			"garbled": "{{{ this is not a kubeconfig",
			"exec": "apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: [{name: x, context: {cluster: x, user: x}}]\n" +
				"clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
				"users: [{name: x, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/touch, args: [/tmp/flotilla-pwned]}}}]\n",
			"token-file": "apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: [{name: x, context: {cluster: x, user: x}}]\n" +
				"clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
				"users: [{name: x, user: {tokenFile: /etc/passwd}}]\n",
		} {
			if err := cl.Create(ctx, sandbox.KubeconfigSecret("bad-"+name, []byte(kubeconfig))); err != nil {
				t.Fatal(err)
			}
			createClusterTarget(t, cl, "bad-"+name, "bad-"+name)
			want := v1alpha1.ReasonKubeconfigRefused
			if name == "garbled" {
				want = v1alpha1.ReasonKubeconfigInvalid
			}
			if err := src.WaitTarget(ctx, client.ObjectKey{Name: "bad-" + name}, 10*time.Second, func(st *v1alpha1.TargetStatus) bool {
				c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
				return c != nil && c.Status == metav1.ConditionFalse && c.Reason == want
			}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.Stat("/tmp/flotilla-pwned"); err == nil {
			t.Fatal("the agent ran the exec plugin of a peer's kubeconfig")
		}
	})

	t.Run("a deleted target drains: waiting candidates go, running pods stay mirrored, then its node goes", func(t *testing.T) {
		// A pod t1 cannot run waits there as a candidate.
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, optedInPod("toobig", "64"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t1Client := t1.Client()
		waitFor(t, 30*time.Second, "the waiting candidate in t1", func() (bool, string) {
			n := countCandidates(t, t1Client, "toobig")
			return n == 1, fmt.Sprintf("%d candidates", n)
		})
		if err := cl.Delete(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "t1"}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the waiting candidate deleted", func() (bool, string) {
			n := countCandidates(t, t1Client, "toobig")
			return n == 0, fmt.Sprintf("%d candidates", n)
		})
		// Two pods run in t1: the target drains, the node stays.
		waitFor(t, 30*time.Second, "the target draining", func() (bool, string) {
			ct := &v1alpha1.ClusterTarget{}
			if err := cl.Get(ctx, client.ObjectKey{Name: "t1"}, ct); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(ct.Status.Conditions, v1alpha1.TargetReady)
			return c != nil && c.Reason == "Draining" && strings.Contains(c.Message, "2 pods"), fmt.Sprintf("%+v", c)
		})
		if _, err := srcClient.CoreV1().Nodes().Get(ctx, "flotilla-t1", metav1.GetOptions{}); err != nil {
			t.Fatalf("the virtual node of a draining target is gone: %v", err)
		}
		// An agent restarted meanwhile drains on: the node stays while
		// pods run there.
		if err := agent.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		if err := agent.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the target draining after the agent's restart", func() (bool, string) {
			if _, err := srcClient.CoreV1().Nodes().Get(ctx, "flotilla-t1", metav1.GetOptions{}); err != nil {
				return false, fmt.Sprintf("virtual node: %v", err)
			}
			ct := &v1alpha1.ClusterTarget{}
			if err := cl.Get(ctx, client.ObjectKey{Name: "t1"}, ct); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(ct.Status.Conditions, v1alpha1.TargetReady)
			return c != nil && c.Reason == "Draining" && strings.Contains(c.Message, "2 pods") && c.LastTransitionTime.After(time.Now().Add(-time.Minute)), fmt.Sprintf("%+v", c)
		})
		if _, err := srcClient.CoreV1().Nodes().Get(ctx, "flotilla-t1", metav1.GetOptions{}); err != nil {
			t.Fatalf("the virtual node of a draining target is gone after the agent's restart: %v", err)
		}
		// Still mirrored: deleting a source pod deletes its delegate.
		for _, name := range []string{"early", "beside-broken"} {
			if err := srcClient.CoreV1().Pods(placementNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 60*time.Second, "the pods gone from both clusters, the node and the target removed", func() (bool, string) {
			if n := countCandidates(t, t1Client, ""); n != 0 {
				return false, fmt.Sprintf("%d candidates left in t1", n)
			}
			if _, err := srcClient.CoreV1().Nodes().Get(ctx, "flotilla-t1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("virtual node still there (%v)", err)
			}
			err := cl.Get(ctx, client.ObjectKey{Name: "t1"}, &v1alpha1.ClusterTarget{})
			return apierrors.IsNotFound(err), fmt.Sprintf("ClusterTarget t1: %v", err)
		})
		// The pod that waited is still pending, not lost: a new target runs it.
		if err := src.AddTarget(ctx, t2); err != nil {
			t.Fatal(err)
		}
		if err := t2.AddNode(ctx, sandbox.NodeSpec{Name: "t2-big", CPU: "64"}); err != nil {
			t.Fatal(err)
		}
		waitSourcePods(t, srcClient, "app=toobig", 1, func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-t2" && p.Status.Phase == corev1.PodRunning
		})
	})
	if !agent.Running() {
		t.Fatal("the agent exited")
	}
	if agent.PID() == 0 {
		t.Fatal("no agent pid")
	}
}

func createNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{protocol.NamespaceEnabledLabel: "true"}}}
	if _, err := c.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func createClusterTarget(t *testing.T, cl client.Client, name, secret string) {
	t.Helper()
	ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name}}
	ct.Spec.KubeconfigSecretRef = &v1alpha1.SecretKeyRef{LocalSecretKeyRef: v1alpha1.LocalSecretKeyRef{Name: secret}}
	if err := cl.Create(t.Context(), ct); err != nil {
		t.Fatal(err)
	}
}

// countCandidates counts the candidates (not being deleted) in a cluster's
// test namespace; app, unless empty, narrows them to those of pods labelled
// app=app (a label the candidates carry renamed, protocol.CarriedLabelKey).
func countCandidates(t *testing.T, c kubernetes.Interface, app string) int {
	t.Helper()
	sel := protocol.CandidateLabel + "=true"
	if app != "" {
		key, _ := protocol.CarriedLabelKey("app")
		sel += "," + key + "=" + app
	}
	pods, err := c.CoreV1().Pods(placementNS).List(t.Context(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// caDataOf is the certificate-authority-data of a kubeconfig file.
func caDataOf(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "certificate-authority-data: "); ok {
			return v
		}
	}
	t.Fatalf("no certificate-authority-data in %s", path)
	return ""
}
