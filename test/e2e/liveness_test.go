package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestSameNameRecreated deletes a pod and creates it again under the same
// name while its target cannot be reached: once the target is back, the
// candidate of the earlier pod is collected, though the name lives on.
func TestSameNameRecreated(t *testing.T) {
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "c2", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
	}})
	ctx := t.Context()
	src, c2 := s.Cluster("src"), s.Cluster("c2")
	for _, c := range []*sandbox.Cluster{src, c2} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: placementNS, Labels: map[string]string{protocol.NamespaceEnabledLabel: "true"}}}
		if _, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sandbox.StartAgent(ctx, src, []*sandbox.Cluster{c2}); err != nil {
		t.Fatal(err)
	}
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
