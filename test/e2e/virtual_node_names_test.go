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
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestVirtualNodeNamesDoNotCollide: ClusterTarget a-b (another cluster)
// and the self Target b of namespace a, to which the old names gave one
// node, flotilla-a-b, each get a Ready node of their own and run their own
// pods there. A node of the old form left by Target c of namespace a
// (flotilla-a-c, no pod on it) keeps ClusterTarget a-c off that name,
// refused with VirtualNodeTaken naming the Target and without touching the
// node, until Target c comes back and deletes the node; a real node named
// as a ClusterTarget's node is never taken. A pod that the agent before
// one-to-one names bound to Target d's node of the old form keeps being
// served there (status, logs, deletion) and the node goes with it; one
// bound to an old node that a ClusterTarget of its name kept is served by
// the Target beside the ClusterTarget's own node controller.
func TestVirtualNodeNamesDoNotCollide(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", Nodes: []sandbox.NodeSpec{{Name: "home-node", CPU: "8"}, {Name: "flotilla-real", CPU: "1"}}},
		{Name: "remote", Nodes: []sandbox.NodeSpec{{Name: "remote-node", CPU: "8"}}},
	}})
	ctx := t.Context()
	src, remote := s.Cluster("src"), s.Cluster("remote")
	createNamespace(t, src.Client(), "a")
	createNamespace(t, remote.Client(), "a")
	agent, err := sandbox.StartAgentWith(ctx, src, nil, sandbox.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	kube, cl := src.Client(), src.CRClient()

	// As the agent wrote a namespaced Target's node before names were
	// one-to-one: no owner annotation, the Target's name in its labels.
	oldNode := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: protocol.LegacyVirtualNodeName("a", "c"), Labels: map[string]string{
			vnode.TypeLabel: vnode.TypeValue, vnode.TargetLabel: "c", protocol.TargetNamespaceLabel: "a",
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{vnode.Taint()}},
	}
	if _, err := kube.CoreV1().Nodes().Create(ctx, oldNode, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	data, err := os.ReadFile(remote.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, sandbox.KubeconfigSecret("flotilla-target-remote", data)); err != nil {
		t.Fatal(err)
	}
	createClusterTarget(t, cl, "a-b", "flotilla-target-remote")
	selfTarget := func(t *testing.T, name string) *v1alpha1.Target {
		tg := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name}}
		tg.Spec.Self = true
		if err := cl.Create(ctx, tg); err != nil {
			t.Fatal(err)
		}
		return tg
	}
	selfTarget(t, "b")

	readyAt := func(t *testing.T, key client.ObjectKey, node string) {
		t.Helper()
		if err := src.WaitTarget(ctx, key, 60*time.Second, func(st *v1alpha1.TargetStatus) bool {
			return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady) && st.VirtualNode == node
		}); err != nil {
			t.Fatal(err)
		}
		waitNode(t, kube, node, 30*time.Second, "Ready, owned by "+key.String(), func(n *corev1.Node) bool {
			owner, _ := vnode.OwnerOf(n)
			return nodeReady(n) && owner == protocol.NodeOwner{Namespace: key.Namespace, Name: key.Name}
		})
	}
	t.Run("a ClusterTarget and a Target that shared a node name each run their own node and pods", func(t *testing.T) {
		readyAt(t, client.ObjectKey{Name: "a-b"}, "flotilla-a-b")
		readyAt(t, client.ObjectKey{Namespace: "a", Name: "b"}, "flotilla.a.b")
		// Nobody but the agent puts a pod on a virtual node, of either form.
		intruder := optedInPod("intruder", "1")
		delete(intruder.Labels, protocol.ElectLabel)
		intruder.Spec.NodeName = "flotilla.a.b"
		if _, err := kube.CoreV1().Pods("a").Create(ctx, intruder, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("creating a pod on the Target's node flotilla.a.b: %v, want Forbidden", err)
		}

		for _, tc := range []struct{ pod, host, node string }{
			{"to-remote", "remote-node", "flotilla-a-b"},
			{"to-home", "home-node", "flotilla.a.b"},
		} {
			pod := optedInPod(tc.pod, "1")
			pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: tc.host}
			created, err := kube.CoreV1().Pods("a").Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			waitPod(t, kube, "a", tc.pod, "Running on "+tc.node, func(p *corev1.Pod) bool {
				return p.Spec.NodeName == tc.node && p.Status.Phase == corev1.PodRunning
			})
			inCluster := remote.Client()
			if tc.node == "flotilla.a.b" {
				inCluster = kube
			}
			if d := delegateOf(t, inCluster, "a", created); d.Spec.NodeName != tc.host {
				t.Fatalf("the delegate of %s runs on %s, want %s", tc.pod, d.Spec.NodeName, tc.host)
			}
		}
	})

	refused := func(t *testing.T, name, word string) {
		t.Helper()
		if err := src.WaitTarget(ctx, client.ObjectKey{Name: name}, 60*time.Second, func(st *v1alpha1.TargetStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonVirtualNodeTaken &&
				strings.Contains(c.Message, word) && st.VirtualNode == ""
		}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a node another target owns, or a real node, is refused and left as it is", func(t *testing.T) {
		createClusterTarget(t, cl, "a-c", "flotilla-target-remote")
		createClusterTarget(t, cl, "real", "flotilla-target-remote")
		refused(t, "a-c", "belongs to Target/a/c")
		refused(t, "real", "is no Flotilla virtual node")
		for _, name := range []string{oldNode.Name, "flotilla-real"} {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if owner, ok := n.Annotations[protocol.VirtualNodeOwnerAnnotation]; ok || (name == oldNode.Name && n.Labels[vnode.TargetLabel] != "c") {
				t.Fatalf("node %s was written by the refused target: owner %q, labels %v", name, owner, n.Labels)
			}
		}
		if n, err := kube.CoreV1().Nodes().Get(ctx, "flotilla-real", metav1.GetOptions{}); err != nil || len(n.Spec.Taints) != 0 {
			t.Fatalf("the real node: %v, taints %v", err, n.Spec.Taints)
		}
	})

	t.Run("the Target deletes its old node once no pod is on it, and the ClusterTarget then takes the name", func(t *testing.T) {
		selfTarget(t, "c")
		readyAt(t, client.ObjectKey{Namespace: "a", Name: "c"}, "flotilla.a.c")
		readyAt(t, client.ObjectKey{Name: "a-c"}, "flotilla-a-c")
		n, err := kube.CoreV1().Nodes().Get(ctx, "flotilla-a-c", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels[vnode.TargetLabel] != "a-c" || n.Labels[protocol.TargetNamespaceLabel] != "" {
			t.Fatalf("node flotilla-a-c: labels %v", n.Labels)
		}
	})

	t.Run("a pod on a Target's node of the old form is served there until it ends, then the node goes", func(t *testing.T) {
		legacy := protocol.LegacyVirtualNodeName("a", "d")
		// What the agent before one-to-one names left: the node, a
		// source pod elected for Target a/d and bound to it, and its
		// delegate running at home.
		old := oldNode.DeepCopy()
		old.Name, old.Labels[vnode.TargetLabel] = legacy, "d"
		if _, err := kube.CoreV1().Nodes().Create(ctx, old, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		source, delegate := leftOnOldNode(t, src, "legacy", "a/d", legacy)

		selfTarget(t, "d")
		readyAt(t, client.ObjectKey{Namespace: "a", Name: "d"}, "flotilla.a.d")
		waitNode(t, kube, legacy, 30*time.Second, "Ready, unschedulable, owned by Target a/d", func(n *corev1.Node) bool {
			return nodeReady(n) && n.Spec.Unschedulable && n.Annotations[protocol.VirtualNodeOwnerAnnotation] == "Target/a/d"
		})
		waitPod(t, kube, "a", source.Name, "Running, mirrored from its delegate", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == legacy && p.Status.Phase == corev1.PodRunning
		})
		logs, err := kube.CoreV1().Pods("a").GetLogs(source.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil || string(logs) != sandbox.PodLogLines {
			t.Fatalf("logs of the pod on the old node: %q, %v", logs, err)
		}
		// A new pod of the namespace that only home fits goes to the
		// Target's node of the new form, never to the old one.
		fresh := optedInPod("fresh", "1")
		fresh.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "home-node"}
		if _, err := kube.CoreV1().Pods("a").Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, kube, "a", "fresh", "bound to a node of the new form", func(p *corev1.Pod) bool {
			return p.Spec.NodeName != "" && p.Spec.NodeName != legacy
		})

		deleteSourcePod(t, kube, source, delegate)
		waitFor(t, 60*time.Second, "the old node gone", func() (bool, string) {
			_, err := kube.CoreV1().Nodes().Get(ctx, legacy, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})

	t.Run("a Target's pod on an old node that a ClusterTarget of its name kept is served by the Target, and the node stays the ClusterTarget's", func(t *testing.T) {
		// Before one-to-one names, ClusterTarget a-e and Target e of
		// namespace a both ran flotilla-a-e, and the ClusterTarget wrote
		// it last.
		shared := oldNode.DeepCopy()
		shared.Name, shared.Labels[vnode.TargetLabel] = "flotilla-a-e", "a-e"
		delete(shared.Labels, protocol.TargetNamespaceLabel)
		if _, err := kube.CoreV1().Nodes().Create(ctx, shared, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createClusterTarget(t, cl, "a-e", "flotilla-target-remote")
		readyAt(t, client.ObjectKey{Name: "a-e"}, "flotilla-a-e")
		source, delegate := leftOnOldNode(t, src, "shared", "a/e", shared.Name)
		selfTarget(t, "e")
		readyAt(t, client.ObjectKey{Namespace: "a", Name: "e"}, "flotilla.a.e")
		waitPod(t, kube, "a", source.Name, "Running, mirrored by the Target", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == shared.Name && p.Status.Phase == corev1.PodRunning
		})
		logs, err := kube.CoreV1().Pods("a").GetLogs(source.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil || string(logs) != sandbox.PodLogLines {
			t.Fatalf("logs of the Target's pod on the ClusterTarget's node: %q, %v", logs, err)
		}
		deleteSourcePod(t, kube, source, delegate)
		n, err := kube.CoreV1().Nodes().Get(ctx, shared.Name, metav1.GetOptions{})
		if err != nil || n.Annotations[protocol.VirtualNodeOwnerAnnotation] != "ClusterTarget/a-e" || n.Spec.Unschedulable || !nodeReady(n) {
			t.Fatalf("the ClusterTarget's node after the Target's pod went: %v, annotations %v, unschedulable %v", err, n.Annotations, n.Spec.Unschedulable)
		}
	})
}

// leftOnOldNode makes what the agent before one-to-one names left of a
// pod placed by self Target target (namespace a): a source pod elected
// there and bound to node, and its delegate running on home-node. Only the
// agent's identity may write these (the chart's pod policy).
func leftOnOldNode(t *testing.T, src *sandbox.Cluster, name, target, node string) (source, delegate *corev1.Pod) {
	t.Helper()
	ctx := t.Context()
	spec := optedInPod(name, "1").Spec
	fields, err := sourcespec.FieldsOf(&spec).Encode()
	if err != nil {
		t.Fatal(err)
	}
	source = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, Annotations: map[string]string{
			protocol.OriginalFieldsAnnotation: fields,
			protocol.ElectionAnnotation:       protocol.Election{Generation: 1, Target: target, Nonce: "before-the-upgrade"}.Encode(),
		}},
		Spec: *spec.DeepCopy(),
	}
	source.Spec.SchedulerName, source.Spec.NodeName = protocol.SourceSchedulerName, node
	source.Spec.Tolerations = []corev1.Toleration{{Key: protocol.VirtualNodeTaintKey, Operator: corev1.TolerationOpExists}}
	agentKube := asAgent(t, src)
	if source, err = agentKube.CoreV1().Pods("a").Create(ctx, source, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	delegate = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "a", Name: protocol.CandidateName(src.Name, target, "a", source.Name, string(source.UID)),
			Labels: map[string]string{
				protocol.CandidateLabel: "true", protocol.SourceClusterLabel: src.Name,
				protocol.TargetLabel: protocol.TargetLabelValue(target), protocol.SourceUIDLabel: string(source.UID),
			},
			Annotations: map[string]string{protocol.SourceNamespaceAnnotation: "a", protocol.SourceNameAnnotation: source.Name},
		},
		Spec: *spec.DeepCopy(),
	}
	delegate.Spec.NodeName = "home-node"
	if delegate, err = agentKube.CoreV1().Pods("a").Create(ctx, delegate, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return source, delegate
}

// deleteSourcePod deletes a source pod and waits until it and its
// delegate are gone.
func deleteSourcePod(t *testing.T, kube kubernetes.Interface, source, delegate *corev1.Pod) {
	t.Helper()
	ctx := t.Context()
	if err := kube.CoreV1().Pods("a").Delete(ctx, source.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the pod and its delegate gone", func() (bool, string) {
		var left []string
		if _, err := kube.CoreV1().Pods("a").Get(ctx, source.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "the source pod")
		}
		if _, err := kube.CoreV1().Pods("a").Get(ctx, delegate.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "the delegate")
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
