package e2e

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestPreElectionThroughEveryKindOfTarget: pre-elections through the
// targets TestPreElection does not use, each the only one a pod may go
// to: the self ClusterTarget (the source cluster itself); a namespaced
// self Target beside it, which a PlacementPolicy that only selects
// clusters picks; and a namespaced Target to another cluster, joined by
// its namespace's owners alone (a Source there, a Target here, no
// cluster-wide object in either), picked the same way. Pods placed one
// after another through each: once its target has answered, a pod is
// elected there before its candidate exists (nonce *), is bound to that
// target's virtual node and runs. A pre-election through a target whose
// scheduler or identity did not take the pre-allowance would not bind:
// once overdue it is revoked and the pod elected the ordinary way, so no
// pod would show the nonce *.
func TestPreElectionThroughEveryKindOfTarget(t *testing.T) {
	t.Parallel()
	const home, tenant, remote = "pre-home", "pre-tenant", "pre-remote"
	const viaKey = "example.com/via"
	ctx := t.Context()
	src, t1 := selfAndAway(t, home, tenant, remote)
	admin, cl := src.Client(), src.CRClient()

	_, tenantNode := readySelfTarget(t, src, tenant, map[string]v1alpha1.LabelValue{viaKey: "tenant"})
	_, remoteNode := joinLabelled(t, src, t1, remote, map[string]v1alpha1.LabelValue{viaKey: "remote"})
	// Each namespaced Target stands beside the self ClusterTarget, which
	// serves its namespace too: a policy that only selects clusters
	// leaves it alone.
	for ns, via := range map[string]string{tenant: "tenant", remote: "remote"} {
		p := &v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "via-" + via}}
		p.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"role": "pre"}}
		p.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{viaKey: via}}
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	for _, path := range []struct{ name, namespace, node string }{
		{"the self ClusterTarget", home, protocol.VirtualNodeName("", src.Name)},
		{"a namespaced self Target, under a policy", tenant, tenantNode},
		{"a namespaced Target to another cluster, under a policy", remote, remoteNode},
	} {
		t.Run(path.name, func(t *testing.T) {
			const pods = 4
			srcPods := admin.CoreV1().Pods(path.namespace)
			preElected := 0
			for i := range pods {
				pod := optedInPod(fmt.Sprintf("p%d", i), "100m")
				pod.Labels["role"] = "pre"
				created, err := srcPods.Create(ctx, pod, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				waitPod(t, admin, path.namespace, created.Name, "running on "+path.node, func(p *corev1.Pod) bool {
					return p.Spec.NodeName == path.node && p.Status.Phase == corev1.PodRunning
				})
				live, err := srcPods.Get(ctx, created.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				e, err := protocol.ParseElection(live.Annotations[protocol.ElectionAnnotation])
				if err != nil {
					t.Fatalf("%s: %v", live.Name, err)
				}
				if e.Nonce == protocol.AnyReservation {
					preElected++
				}
			}
			// The first pod is elected the ordinary way (its target had
			// not answered yet); a slow answer may leave another so.
			if preElected == 0 {
				t.Errorf("none of %d pods was pre-elected through %s", pods, path.name)
			}
			t.Logf("%d of %d pods pre-elected", preElected, pods)
		})
	}
}

// selfAndAway starts src and t1, of 8 CPUs each, with namespaces in src,
// and their agents: t1's, and src's with the self ClusterTarget, which
// serves every namespace of src.
func selfAndAway(t *testing.T, namespaces ...string) (src, t1 *sandbox.Cluster) {
	t.Helper()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
		{Name: "t1", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
	}})
	src, t1 = s.Cluster("src"), s.Cluster("t1")
	for _, ns := range namespaces {
		createNamespace(t, src.Client(), ns)
	}
	if _, err := sandbox.StartAgent(t.Context(), t1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.StartAgent(t.Context(), src, []*sandbox.Cluster{src}); err != nil {
		t.Fatal(err)
	}
	return src, t1
}
