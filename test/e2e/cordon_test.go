package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestACordonedVirtualNodeTakesNoNewPod: the source's admin cordons a
// target's virtual node (kubectl cordon), then taints it (kubectl taint),
// as they would a node of their own. Through the self ClusterTarget
// (cluster-scoped, the source cluster itself) and through a namespaced
// Target to another cluster joined by its namespace's owners (the invited
// identity), each the only target a pod may go to:
//   - a pod running there before the cordon keeps running, its delegate
//     untouched;
//   - the target stays Ready, with reason Cordoned;
//   - a new pod gets no candidate there: it waits Pending, PodScheduled
//     False, Unschedulable, naming the cordon;
//   - uncordoned, the target is Connected again and the waiting pod runs
//     there;
//   - tainted NoSchedule, its Ready condition names the taint; it runs a
//     new pod that tolerates the taint, and one that does not waits,
//     Unschedulable, naming the taint, with no candidate there, until the
//     taint is removed.
//
// Without the agent following the node's spec, the new pods get
// candidates and run on the cordoned or tainted node.
func TestACordonedVirtualNodeTakesNoNewPod(t *testing.T) {
	t.Parallel()
	const home, remote = "cordon-home", "cordon-remote"
	const viaKey = "example.com/via"
	ctx := t.Context()
	src, t1 := selfAndAway(t, home, remote)
	admin, cl := src.Client(), src.CRClient()
	joined, remoteNode := joinLabelled(t, src, t1, remote, map[string]v1alpha1.LabelValue{viaKey: "remote"})
	// The self ClusterTarget serves the remote namespace too: a policy
	// leaves the pods there to the namespaced Target alone.
	p := &v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: remote, Name: "via-remote"}}
	p.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{viaKey: "remote"}}
	if err := cl.Create(ctx, p); err != nil {
		t.Fatal(err)
	}

	for _, path := range []struct {
		name, namespace, node string
		target                client.ObjectKey
		// where the delegates run, and in which namespace
		delegates   kubernetes.Interface
		delegatesNS string
	}{
		{"the self ClusterTarget", home, protocol.VirtualNodeName("", src.Name), client.ObjectKey{Name: src.Name}, admin, home},
		{"a namespaced Target to another cluster", remote, remoteNode, client.ObjectKeyFromObject(joined), t1.Client(), remote},
	} {
		t.Run(path.name, func(t *testing.T) {
			pods := admin.CoreV1().Pods(path.namespace)
			runsThere := func(p *corev1.Pod) bool {
				return p.Spec.NodeName == path.node && p.Status.Phase == corev1.PodRunning
			}
			before, err := pods.Create(ctx, optedInPod("before", "100m"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			waitPod(t, admin, path.namespace, before.Name, "running on "+path.node, runsThere)

			setUnschedulable(t, admin, path.node, true)
			waitReady(t, src, path.target, "Ready, reason Cordoned", func(c *metav1.Condition) bool { return c.Reason == v1alpha1.ReasonCordoned })

			after, err := pods.Create(ctx, optedInPod("after", "100m"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			waitUnschedulable(t, admin, path.namespace, after.Name, "cordoned")
			if got := candidatesOf(t, path.delegates, path.delegatesNS, after.UID); len(got) > 0 {
				t.Errorf("a pod created after the cordon has %d candidate(s) in the cordoned target, first %s", len(got), got[0].Name)
			}
			live, err := pods.Get(ctx, before.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !runsThere(live) {
				t.Errorf("the pod running before the cordon is %s on %q", live.Status.Phase, live.Spec.NodeName)
			}
			if got := candidatesOf(t, path.delegates, path.delegatesNS, before.UID); len(got) != 1 || got[0].Spec.NodeName == "" {
				t.Errorf("the delegate of the pod running before the cordon is gone or unbound: %d candidate(s)", len(got))
			}

			setUnschedulable(t, admin, path.node, false)
			waitReady(t, src, path.target, "Ready, Connected again once uncordoned", func(c *metav1.Condition) bool { return c.Reason == v1alpha1.ReasonConnected })
			waitPod(t, admin, path.namespace, after.Name, "running on "+path.node+" once uncordoned", runsThere)

			// Tainted NoSchedule, the node takes the pods that tolerate
			// the taint, and no other.
			setTaint(t, admin, path.node, true)
			waitReady(t, src, path.target, "Ready, naming its virtual node's taint", func(c *metav1.Condition) bool {
				return strings.Contains(c.Message, dedicatedTaint.ToString())
			})
			plain, err := pods.Create(ctx, optedInPod("plain", "100m"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tolerant := optedInPod("tolerant", "100m")
			tolerant.Spec.Tolerations = []corev1.Toleration{{Key: dedicatedTaint.Key, Operator: corev1.TolerationOpEqual, Value: dedicatedTaint.Value, Effect: dedicatedTaint.Effect}}
			if _, err := pods.Create(ctx, tolerant, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitPod(t, admin, path.namespace, tolerant.Name, "tolerating the taint, running on "+path.node, runsThere)
			waitUnschedulable(t, admin, path.namespace, plain.Name, dedicatedTaint.ToString())
			if got := candidatesOf(t, path.delegates, path.delegatesNS, plain.UID); len(got) > 0 {
				t.Errorf("a pod that does not tolerate the node's taint has %d candidate(s) in its target, first %s", len(got), got[0].Name)
			}
			setTaint(t, admin, path.node, false)
			waitPod(t, admin, path.namespace, plain.Name, "running on "+path.node+" once untainted", runsThere)
		})
	}
}

// dedicatedTaint is what an operator puts on a virtual node to keep it for
// the pods that tolerate it.
var dedicatedTaint = corev1.Taint{Key: "example.com/dedicated", Value: "team", Effect: corev1.TaintEffectNoSchedule}

// setTaint adds (or removes) dedicatedTaint on a node, keeping its others,
// as kubectl taint does.
func setTaint(t *testing.T, c kubernetes.Interface, name string, on bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.MatchTaint(&dedicatedTaint) })
		if on {
			node.Spec.Taints = append(node.Spec.Taints, dedicatedTaint)
		}
		_, err = c.CoreV1().Nodes().Update(t.Context(), node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setUnschedulable cordons (or uncordons) a node as kubectl does: a merge
// patch of spec.unschedulable.
func setUnschedulable(t *testing.T, c kubernetes.Interface, node string, on bool) {
	t.Helper()
	patch := `{"spec":{"unschedulable":false}}`
	if on {
		patch = `{"spec":{"unschedulable":true}}`
	}
	if _, err := c.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitReady waits until the Ready condition of the target at key in src is
// True and ok says it is as wanted.
func waitReady(t *testing.T, src *sandbox.Cluster, key client.ObjectKey, what string, ok func(*metav1.Condition) bool) {
	t.Helper()
	if err := src.WaitTarget(t.Context(), key, time.Minute, func(st *v1alpha1.TargetStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
		return c != nil && c.Status == metav1.ConditionTrue && ok(c)
	}); err != nil {
		t.Fatalf("target %s never %s: %v", key, what, err)
	}
}

// waitUnschedulable waits until the pod waits unbound with PodScheduled
// False, reason Unschedulable, its message naming why.
func waitUnschedulable(t *testing.T, c kubernetes.Interface, ns, name, why string) {
	t.Helper()
	waitPod(t, c, ns, name, "Pending, Unschedulable, naming "+why, func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return p.Spec.NodeName == "" && strings.Contains(cond.Message, why)
			}
		}
		return false
	})
}
