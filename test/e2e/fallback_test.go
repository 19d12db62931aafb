package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestFallbackGroups places pods under a PlacementPolicy whose first
// fallback group is one target, near, and whose second is far, both
// reached through invited identities. The second group is used only for a
// pod near cannot run: first because near has no room left for it, then
// because near's scheduler is down, so that near takes candidates through
// its API server and never answers them; last for a oneCluster gang that
// near has room for but, silent, never answers (each member's plan widens
// on its own candidate's overdue mark, and the gang must still run whole).
func TestFallbackGroups(t *testing.T) {
	t.Parallel()
	const tier = "example.com/tier"
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "near", Nodes: []sandbox.NodeSpec{{CPU: "2"}}},
		{Name: "far", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
	}})
	ctx := t.Context()
	src, near, far := s.Cluster("src"), s.Cluster("near"), s.Cluster("far")
	createNamespace(t, src.Client(), placementNS)
	for _, c := range []*sandbox.Cluster{src, near, far} {
		if _, err := sandbox.StartAgent(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	cr := src.CRClient()
	for _, c := range []*sandbox.Cluster{near, far} {
		invite(t, src, c)
		labelTarget(t, cr, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: c.Name}}, map[string]string{tier: c.Name})
		cpu := map[string]int64{"near": 2, "far": 8}[c.Name]
		waitNode(t, src.Client(), protocol.VirtualNodeName("", c.Name), 60*time.Second, "with its tier and the capacity of its summary", func(n *corev1.Node) bool {
			return n.Labels[tier] == c.Name && n.Status.Allocatable.Cpu().Value() == cpu
		})
	}
	policy := &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "near-first", Namespace: placementNS},
		Spec: v1alpha1.PlacementPolicySpec{
			ClusterAffinity: &v1alpha1.ClusterAffinity{FallbackGroups: []metav1.LabelSelector{
				{MatchLabels: map[string]string{tier: "near"}},
				{MatchLabels: map[string]string{tier: "far"}},
			}},
		},
	}
	if err := cr.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	srcKube := src.Client()
	onNode := func(target string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			return p.Spec.NodeName == protocol.VirtualNodeName("", target) && p.Status.Phase == corev1.PodRunning
		}
	}

	t.Run("a full group", func(t *testing.T) {
		// near holds two of the three, which go there first; the third,
		// unschedulable in near, runs in far.
		if _, err := srcKube.AppsV1().Deployments(placementNS).Create(ctx, optedInDeployment("spill", 3, "800m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 120*time.Second, "two pods of spill running in near, one in far", func() (bool, string) {
			list, err := srcKube.CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: "app=spill,!" + protocol.CandidateLabel})
			if err != nil {
				return false, err.Error()
			}
			in := map[string]int{}
			for i := range list.Items {
				for _, target := range []string{"near", "far"} {
					if onNode(target)(&list.Items[i]) {
						in[target]++
					}
				}
			}
			return in["near"] == 2 && in["far"] == 1 && len(list.Items) == 3, fmt.Sprintf("%d pods, running %v", len(list.Items), in)
		})
	})

	t.Run("a silent group", func(t *testing.T) {
		// near has room (400m) and its summary says so, but nothing
		// answers its candidates.
		if err := near.Stop(sandbox.CandidateScheduler); err != nil {
			t.Fatal(err)
		}
		const pods = 2
		if _, err := srcKube.AppsV1().Deployments(placementNS).Create(ctx, optedInDeployment("quiet", pods, "100m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		running := waitSourcePods(t, srcKube, "app=quiet", pods, onNode("far"))
		// The case under test happened: each pod's candidate waited in
		// near before far was asked.
		for i := range running {
			if among := electedAmong(t, srcKube, &running[i]); !strings.Contains(among, "near") {
				t.Errorf("pod %s ran in far without a candidate in near first: elected among %q", running[i].Name, among)
			}
		}
		waitFor(t, 30*time.Second, "no unbound candidate left in near", func() (bool, string) {
			list, err := near.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
			if err != nil {
				return false, err.Error()
			}
			left := 0
			for _, p := range list.Items {
				if p.Spec.NodeName == "" {
					left++
				}
			}
			return left == 0, fmt.Sprintf("%d unbound candidates left", left)
		})
	})

	t.Run("a gang past a silent group", func(t *testing.T) {
		// near, its scheduler still down, gets its room back and its
		// summary says it holds the whole gang: the gang's members go
		// there first, and once near is overdue, all of them to far.
		if err := srcKube.AppsV1().Deployments(placementNS).Delete(ctx, "spill", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		nearCR := near.CRClient()
		waitFor(t, 60*time.Second, "near's summary publishing room for the gang (1.5 CPU)", func() (bool, string) {
			var sums v1alpha1.ClusterSummaryList
			if err := nearCR.List(ctx, &sums); err != nil {
				return false, err.Error()
			}
			for _, sum := range sums.Items {
				if sum.Status.Free.Cpu().Cmp(resource.MustParse("1500m")) >= 0 {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d summaries, none with 1.5 CPU free", len(sums.Items))
		})
		const size = 3
		watch := watchGangs(t, src, placementNS, map[string]int{"crew": size})
		members := gangPods("crew", size, size, protocol.GangOneCluster)
		for _, m := range members {
			m.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("500m")
			if _, err := srcKube.CoreV1().Pods(placementNS).Create(ctx, m, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		running := waitSourcePods(t, srcKube, protocol.PodGroupLabel+"=crew", size, onNode("far"))
		watch.check(t)
		asked := 0
		for i := range running {
			if strings.Contains(electedAmong(t, srcKube, &running[i]), "near") {
				asked++
			}
		}
		if asked == 0 {
			t.Error("the gang ran in far without a candidate in near first: the silent group was never tried")
		}
	})
}

// TestFallbackPastASilentSelfTarget: the same through other kinds of
// target. The first fallback group is the source cluster itself (its self
// ClusterTarget), the second a namespaced Target to another cluster,
// joined by the namespace's owners alone. A pod runs at home while the
// source's candidate scheduler answers; with it stopped, the next pods
// wait at home, then run through the namespaced Target.
func TestFallbackPastASilentSelfTarget(t *testing.T) {
	t.Parallel()
	const tier, ns = "example.com/tier", "edge"
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
		{Name: "t1", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
	}})
	ctx := t.Context()
	src, t1 := s.Cluster("src"), s.Cluster("t1")
	admin, cr := src.Client(), src.CRClient()
	createNamespace(t, admin, ns)
	if _, err := sandbox.StartAgent(ctx, t1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.StartAgent(ctx, src, []*sandbox.Cluster{src}); err != nil {
		t.Fatal(err)
	}
	labelTarget(t, cr, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: src.Name}}, map[string]string{tier: "home"})
	awayNode := joinThroughSource(t, src, t1, ns)
	labelTarget(t, cr, &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: t1.Name}}, map[string]string{tier: "away"})
	homeNode := protocol.VirtualNodeName("", src.Name)
	for node, want := range map[string]string{homeNode: "home", awayNode: "away"} {
		waitNode(t, admin, node, 60*time.Second, "with its tier", func(n *corev1.Node) bool { return n.Labels[tier] == want })
	}
	policy := &v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "home-first", Namespace: ns}}
	policy.Spec.ClusterAffinity = &v1alpha1.ClusterAffinity{FallbackGroups: []metav1.LabelSelector{
		{MatchLabels: map[string]string{tier: "home"}},
		{MatchLabels: map[string]string{tier: "away"}},
	}}
	if err := cr.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	pods := admin.CoreV1().Pods(ns)
	runsOn := func(name, node string) *corev1.Pod {
		t.Helper()
		var got *corev1.Pod
		waitFor(t, 120*time.Second, name+" running on "+node, func() (bool, string) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			got = p
			return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("on %q, %s", p.Spec.NodeName, p.Status.Phase)
		})
		return got
	}
	if _, err := pods.Create(ctx, optedInPod("at-home", "100m"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runsOn("at-home", homeNode)

	if err := src.Stop(sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"away-0", "away-1"} {
		if _, err := pods.Create(ctx, optedInPod(name, "100m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"away-0", "away-1"} {
		if among := electedAmong(t, admin, runsOn(name, awayNode)); !strings.Contains(among, src.Name) {
			t.Errorf("%s ran away without a candidate at home first: elected among %q", name, among)
		}
	}
}

// electedAmong is the targets that held the pod's candidates when it was
// elected, as its Scheduled Event names them ("" when it has none).
func electedAmong(t *testing.T, kube kubernetes.Interface, pod *corev1.Pod) string {
	t.Helper()
	list, err := kube.CoreV1().Events(pod.Namespace).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID)})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if _, among, ok := strings.Cut(e.Message, "of the candidates in "); ok && e.Reason == "Scheduled" {
			among, _, _ = strings.Cut(among, ", whose node")
			return among
		}
	}
	return ""
}

// labelTarget sets labels in the spec of a ClusterTarget or a Target (a
// merge patch: other labels stay).
func labelTarget(t *testing.T, cr client.Client, target client.Object, labels map[string]string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"labels": labels}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cr.Patch(t.Context(), target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}
