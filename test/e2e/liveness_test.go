package e2e

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestSameNameRecreated deletes a pod and creates it again under the same
// name while its target cannot be reached: once the target is back, the
// candidate of the earlier pod is collected, though the name lives on.
func TestSameNameRecreated(t *testing.T) {
	src, c2 := sourceAndTarget(t, "4")
	ctx := t.Context()
	srcPods, c2Pods := src.Client().CoreV1().Pods(placementNS), c2.Client().CoreV1().Pods(placementNS)

	// A pod no node fits: its candidate waits in c2, unschedulable.
	first, err := srcPods.Create(ctx, optedInPod("stateful-0", "100"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	candidatesOf := func(uid types.UID) func() (bool, string) {
		return func() (bool, string) {
			list, err := c2Pods.List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(uid)})
			if err != nil {
				return false, err.Error()
			}
			return len(list.Items) == 1, fmt.Sprintf("%d candidates of %s", len(list.Items), uid)
		}
	}
	waitFor(t, 60*time.Second, "the first pod's candidate in c2", candidatesOf(first.UID))

	if err := c2.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := srcPods.Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the first pod gone", func() (bool, string) {
		p, err := srcPods.Get(ctx, first.Name, metav1.GetOptions{})
		return err != nil, fmt.Sprintf("still there (uid %s, err %v)", p.UID, err)
	})
	second, err := srcPods.Create(ctx, optedInPod("stateful-0", "100"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}

	waitFor(t, 60*time.Second, "the second pod's candidate in c2", candidatesOf(second.UID))
	waitFor(t, 60*time.Second, "no candidate of the first pod left in c2", func() (bool, string) {
		list, err := c2Pods.List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(first.UID)})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d candidates of the first pod left", len(list.Items))
	})
}

// TestBlackholedTarget places pods while one target accepts connections
// and never answers (packets dropped, not refused): once the source knows
// that target does not answer, placement on the others does not wait a
// call timeout for it.
func TestBlackholedTarget(t *testing.T) {
	src, c2 := sourceAndTarget(t, "32")
	ctx := t.Context()

	// A listener that takes every connection and never says a word.
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hole.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: hole
  cluster:
    server: https://%s
    certificate-authority-data: %s
users:
- name: hole
  user:
    token: nobody-answers
contexts:
- name: hole
  context: {cluster: hole, user: hole}
current-context: hole
`, hole.Addr(), caDataOf(t, c2.Kubeconfig))
	cl := src.CRClient()
	if err := cl.Create(ctx, sandbox.KubeconfigSecret("flotilla-target-hole", []byte(kubeconfig))); err != nil {
		t.Fatal(err)
	}
	createClusterTarget(t, cl, "hole", "flotilla-target-hole")
	if err := src.WaitTarget(ctx, client.ObjectKey{Name: "hole"}, 60*time.Second, func(s *v1alpha1.TargetStatus) bool {
		c := meta.FindStatusCondition(s.Conditions, v1alpha1.TargetReachable)
		return c != nil && c.Status == metav1.ConditionFalse
	}); err != nil {
		t.Fatal(err)
	}

	const n = 20
	srcPods := src.Client().CoreV1().Pods(placementNS)
	for i := range n {
		if _, err := srcPods.Create(ctx, optedInPod(fmt.Sprintf("web-%d", i), "100m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := waitSourcePods(t, src.Client(), "app", n, func(p *corev1.Pod) bool { return p.Spec.NodeName == "flotilla-c2" })
	var waits []time.Duration
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
				waits = append(waits, c.LastTransitionTime.Sub(p.CreationTimestamp.Time))
			}
		}
	}
	if len(waits) != n {
		t.Fatalf("%d of %d pods have a PodScheduled=True condition", len(waits), n)
	}
	slices.Sort(waits)
	median := waits[n/2]
	t.Logf("creation to bound with a blackholed target: median %s, max %s", median, waits[n-1])
	// Each call to the blackholed target would cost its timeout (10s).
	if median >= 10*time.Second {
		t.Errorf("median creation to bound %s: placement waited on the target that does not answer", median)
	}
}

// sourceAndTarget starts src, whose agent targets c2 (one node of cpu
// CPUs) with c2's admin kubeconfig, with placementNS opted in in both.
func sourceAndTarget(t *testing.T, cpu string) (src, c2 *sandbox.Cluster) {
	t.Helper()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "c2", Nodes: []sandbox.NodeSpec{{CPU: cpu}}},
	}})
	src, c2 = s.Cluster("src"), s.Cluster("c2")
	for _, c := range []*sandbox.Cluster{src, c2} {
		createNamespace(t, c.Client(), placementNS)
	}
	if _, err := sandbox.StartAgent(t.Context(), src, []*sandbox.Cluster{c2}); err != nil {
		t.Fatal(err)
	}
	return src, c2
}
