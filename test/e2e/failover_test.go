package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// failoverToleration is the source pods' toleration of a NotReady virtual
// node in this test, set through the chart.
const failoverToleration = 10 * time.Second

// failoverNotReadyAfter is how long a target's API server must fail to
// answer before its virtual node turns NotReady, in the tests that stop
// one (the chart's default is 20 s): the tests wait for it, and a busy
// target that still answers its candidate watch is not taken for gone.
const failoverNotReadyAfter = 8 * time.Second

// TestVirtualNodes checks what a source cluster's operator and users see of
// the targets through their virtual nodes: each node shows its target's
// summary (capacity, zone labels) and follows it; when a target's API server
// stops, its node turns NotReady, the pods there are evicted and recreated
// in another target, and once the target is back no delegate of a moved pod
// remains there; a DaemonSet that tolerates every taint does not leave pods
// stuck on virtual nodes.
func TestVirtualNodes(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
		{Name: "c2", Nodes: []sandbox.NodeSpec{
			{CPU: "4", Labels: map[string]string{corev1.LabelTopologyRegion: "r1", corev1.LabelTopologyZone: "z2"}},
			{CPU: "4", Labels: map[string]string{corev1.LabelTopologyRegion: "r1", corev1.LabelTopologyZone: "z2"}},
		}},
		{Name: "c3", Nodes: []sandbox.NodeSpec{
			{CPU: "8", Labels: map[string]string{corev1.LabelTopologyRegion: "r1", corev1.LabelTopologyZone: "z3"}},
		}},
	}})
	ctx := t.Context()
	src, c2, c3 := s.Cluster("src"), s.Cluster("c2"), s.Cluster("c3")
	srcClient := src.Client()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: placementNS, Labels: map[string]string{protocol.NamespaceEnabledLabel: "true"}}}
	if _, err := srcClient.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startFailoverAgents(t, src, c2, c3)
	// c3 comes later, so that the first pods all run in c2.
	invite(t, src, c2)

	t.Run("a virtual node shows its target's summary and follows it", func(t *testing.T) {
		waitNode(t, srcClient, "flotilla-c2", 30*time.Second, "8 CPUs and zone z2", func(n *corev1.Node) bool {
			return n.Status.Allocatable.Cpu().Cmp(resource.MustParse("8")) == 0 &&
				n.Labels[corev1.LabelTopologyZone] == "z2" && n.Labels[corev1.LabelTopologyRegion] == "r1" &&
				n.Annotations[vnode.FreeAnnotation] != ""
		})
		added := time.Now()
		if err := c2.AddNode(ctx, sandbox.NodeSpec{Name: "c2-node-added", CPU: "4",
			Labels: map[string]string{corev1.LabelTopologyRegion: "r1", corev1.LabelTopologyZone: "z2"}}); err != nil {
			t.Fatal(err)
		}
		waitNode(t, srcClient, "flotilla-c2", 10*time.Second, "12 CPUs after a node was added", func(n *corev1.Node) bool {
			return n.Status.Allocatable.Cpu().Cmp(resource.MustParse("12")) == 0
		})
		t.Logf("the virtual node showed the added node after %s", time.Since(added).Round(100*time.Millisecond))
	})

	deployment := optedInDeployment("web", 2, "1")
	deployment.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	if _, err := srcClient.AppsV1().Deployments(placementNS).Create(ctx, deployment, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := waitSourcePods(t, srcClient, "app=web", 2, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "flotilla-c2"
	})

	t.Run("describe tells the story of a placement", func(t *testing.T) {
		// Sent to every target (c2, the only one): no FannedOut Event, a
		// write per pod less; Scheduled names the candidates.
		waitEvent(t, srcClient, &first[0], "Scheduled", "of the candidates in c2, whose node")
	})

	invite(t, src, c3)
	waitNode(t, srcClient, "flotilla-c3", 30*time.Second, "zone z3", func(n *corev1.Node) bool {
		return n.Labels[corev1.LabelTopologyZone] == "z3" && n.Status.Allocatable.Cpu().Cmp(resource.MustParse("8")) == 0
	})

	t.Run("pods of a target that stops answering move to another", func(t *testing.T) {
		if err := c2.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		waitNode(t, srcClient, "flotilla-c2", 40*time.Second, "NotReady", func(n *corev1.Node) bool {
			return !vnodeReady(n)
		})
		t.Logf("flotilla-c2 NotReady %s after c2's API server stopped", time.Since(stopped).Round(100*time.Millisecond))
		waitEvent(t, srcClient, &first[0], vnode.ReasonTargetLost, "c2")

		// Evicted after the toleration, recreated by the ReplicaSet, placed
		// in c3; the evicted pods end without waiting for c2.
		waitSourcePods(t, srcClient, "app=web", 2, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "flotilla-c3" && p.DeletionTimestamp == nil
		})
		t.Logf("both pods run in c3 %s after c2's API server stopped", time.Since(stopped).Round(100*time.Millisecond))
		for _, p := range first {
			if _, err := srcClient.CoreV1().Pods(placementNS).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("evicted pod %s still exists (err %v)", p.Name, err)
			}
		}
	})

	t.Run("once the target is back, no delegate of a moved pod remains there", func(t *testing.T) {
		if err := c2.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		waitNode(t, srcClient, "flotilla-c2", 60*time.Second, "Ready again", vnodeReady)
		c2Client := c2.Client()
		waitFor(t, 60*time.Second, "no candidate of src left in c2", func() (bool, string) {
			list, err := c2Client.CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceClusterLabel + "=src"})
			if err != nil {
				return false, err.Error()
			}
			var names []string
			for _, p := range list.Items {
				names = append(names, p.Name+"@"+p.Spec.NodeName)
			}
			return len(list.Items) == 0, fmt.Sprintf("left: %v", names)
		})
		waitSourcePods(t, srcClient, "app=web", 2, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "flotilla-c3"
		})
	})

	t.Run("a DaemonSet that tolerates every taint leaves no pod stuck on a virtual node", func(t *testing.T) {
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "agent-everywhere", Namespace: "default"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent-everywhere"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent-everywhere"}},
					Spec: corev1.PodSpec{
						Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
						Containers:  []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}},
					},
				},
			},
		}
		if _, err := srcClient.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rejected := map[string]bool{}
		waitFor(t, 60*time.Second, "the DaemonSet's pods on both virtual nodes rejected, and its pod on the real node running", func() (bool, string) {
			list, err := srcClient.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=agent-everywhere"})
			if err != nil {
				return false, err.Error()
			}
			running := false
			var seen []string
			for _, p := range list.Items {
				seen = append(seen, fmt.Sprintf("%s@%s:%s/%s", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Reason))
				switch {
				case strings.HasPrefix(p.Spec.NodeName, "flotilla-") && p.Status.Phase == corev1.PodFailed && p.Status.Reason == vnode.ReasonRejected:
					rejected[p.Spec.NodeName] = true
				case p.Spec.NodeName == "src-node-0" && p.Status.Phase == corev1.PodRunning:
					running = true
				}
			}
			return rejected["flotilla-c2"] && rejected["flotilla-c3"] && running, fmt.Sprintf("rejected on %v; pods %v", slices.Sorted(maps.Keys(rejected)), seen)
		})
	})
}

// startFailoverAgents starts the agents of targets, then the source's
// release with the failover tests' toleration of a NotReady virtual node
// and the delay before a silent target's node turns NotReady.
func startFailoverAgents(t *testing.T, src *sandbox.Cluster, targets ...*sandbox.Cluster) {
	t.Helper()
	for _, c := range targets {
		if _, err := sandbox.StartAgent(t.Context(), c, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.InstallRelease(t.Context(), sandbox.ReleaseOptions{Set: []string{
		fmt.Sprintf("agent.notReadyTolerationSeconds=%d", int(failoverToleration.Seconds())),
		"agent.virtualNodeNotReadyAfter=" + failoverNotReadyAfter.String(),
	}}); err != nil {
		t.Fatal(err)
	}
}

// invite makes t invite src into placementNS and waits until src's target
// is Ready.
func invite(t *testing.T, src, tgt *sandbox.Cluster) {
	t.Helper()
	if err := src.Invite(t.Context(), tgt, placementNS); err != nil {
		t.Fatal(err)
	}
	if err := src.WaitTargetReady(t.Context(), tgt.Name, 60*time.Second); err != nil {
		t.Fatal(err)
	}
}

func waitNode(t *testing.T, client kubernetes.Interface, name string, timeout time.Duration, what string, ok func(*corev1.Node) bool) {
	t.Helper()
	waitFor(t, timeout, "node "+name+": "+what, func() (bool, string) {
		n, err := client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ok(n), fmt.Sprintf("allocatable %v, labels %v, conditions %v", n.Status.Allocatable, n.Labels, n.Status.Conditions)
	})
}

// waitEvent waits for an event with reason on pod whose message mentions
// word.
func waitEvent(t *testing.T, client kubernetes.Interface, pod *corev1.Pod, reason, word string) {
	t.Helper()
	selector := fields.Set{"involvedObject.name": pod.Name, "involvedObject.uid": string(pod.UID)}.AsSelector().String()
	waitEventOf(t, client, pod.Namespace, selector, "pod "+pod.Name, 30*time.Second, reason, word)
}

// waitEventOf waits for an Event of namespace, among those selector picks
// (by involvedObject), with reason and a message holding word.
func waitEventOf(t *testing.T, client kubernetes.Interface, namespace, selector, what string, timeout time.Duration, reason, word string) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("event %s on %s", reason, what), func() (bool, string) {
		list, err := client.CoreV1().Events(namespace).List(t.Context(), metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Reason == reason && strings.Contains(e.Message, word) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, fmt.Sprintf("events %v", seen)
	})
}
