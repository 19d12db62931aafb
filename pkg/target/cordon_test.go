package target

import (
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

// TestCordonedTargetIsHeldBack: a target whose virtual node is cordoned
// stays Ready, with reason Cordoned, and is held back: placement sends it
// no new pod. Uncordoned, it is Connected again, no longer held back, and
// the pods that wait are looked at again (the set's OnAdd functions run),
// once.
func TestCordonedTargetIsHeldBack(t *testing.T) {
	h, tg, reopened := connectedEast(t)
	noReopen := func(when string) {
		t.Helper()
		if got := reopened(); len(got) > 0 {
			t.Errorf("%s: the pods that wait were looked at again for %v", when, got)
		}
	}

	// kubectl cordon, as the manager's cache of the virtual nodes shows it.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-east"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	if err := h.client.Create(h.ctx, node); err != nil {
		t.Fatal(err)
	}
	h.reconcile("east")
	expectCondition(t, h.status("east").Conditions, v1alpha1.TargetReady, metav1.ConditionTrue, v1alpha1.ReasonCordoned)
	if why := tg.HeldBack(h.clock.Now()); !strings.Contains(why, "flotilla-east is cordoned") {
		t.Errorf("cordoned, held back %q, want the cordon named", why)
	}
	noReopen("cordoned")

	node.Spec.Unschedulable = false
	if err := h.client.Update(h.ctx, node); err != nil {
		t.Fatal(err)
	}
	h.reconcile("east")
	expectCondition(t, h.status("east").Conditions, v1alpha1.TargetReady, metav1.ConditionTrue, v1alpha1.ReasonConnected)
	if why := tg.HeldBack(h.clock.Now()); why != "" {
		t.Errorf("uncordoned, still held back: %q", why)
	}
	if got := reopened(); !slices.Equal(got, []string{"east"}) {
		t.Errorf("uncordoned: the pods that wait were looked at again for %v, want east once", got)
	}
	h.reconcile("east")
	noReopen("uncordoned, looked at again")

	// A virtual node that is gone is no cordon.
	node.Spec.Unschedulable = true
	if err := h.client.Update(h.ctx, node); err != nil {
		t.Fatal(err)
	}
	h.reconcile("east")
	if err := h.client.Delete(h.ctx, node); err != nil {
		t.Fatal(err)
	}
	h.reconcile("east")
	expectCondition(t, h.status("east").Conditions, v1alpha1.TargetReady, metav1.ConditionTrue, v1alpha1.ReasonConnected)
}

// TestTaintedTargetKeepsOffPods: the taints an operator puts on a target's
// virtual node are the target's to placement (NodeTaints), the virtual
// node's own and PreferNoSchedule aside; the target stays Connected. A
// taint removed looks at the pods that wait again; one added does not.
func TestTaintedTargetKeepsOffPods(t *testing.T) {
	h, tg, reopened := connectedEast(t)

	gpu := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-east"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		vnode.Taint(), gpu, {Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule},
	}}}
	if err := h.client.Create(h.ctx, node); err != nil {
		t.Fatal(err)
	}
	h.reconcile("east")
	if got := tg.NodeTaints(); len(got) != 1 || !got[0].MatchTaint(&gpu) {
		t.Errorf("the target's taints %v, want %s alone", got, gpu.ToString())
	}
	expectCondition(t, h.status("east").Conditions, v1alpha1.TargetReady, metav1.ConditionTrue, v1alpha1.ReasonConnected)
	if msg := meta.FindStatusCondition(h.status("east").Conditions, v1alpha1.TargetReady).Message; !strings.Contains(msg, gpu.ToString()) {
		t.Errorf("the Ready condition does not name the taint: %q", msg)
	}
	if got := reopened(); len(got) > 0 {
		t.Errorf("a taint added looked at the pods that wait again for %v", got)
	}

	node.Spec.Taints = []corev1.Taint{vnode.Taint()}
	if err := h.client.Update(h.ctx, node); err != nil {
		t.Fatal(err)
	}
	h.reconcile("east")
	if got := tg.NodeTaints(); len(got) != 0 {
		t.Errorf("untainted, the target's taints are %v", got)
	}
	if got := reopened(); !slices.Equal(got, []string{"east"}) {
		t.Errorf("a taint removed looked at the pods that wait again for %v, want east once", got)
	}
}

// connectedEast connects the ClusterTarget east until it is Ready, and
// returns the harness, its target and reopened, which tells the targets
// the set's OnAdd functions ran for since it was last called.
func connectedEast(t *testing.T) (h *targetHarness, tg *Target, reopened func() []string) {
	t.Helper()
	h = newTargetHarness(t, eastTarget())
	if err := h.client.Create(h.ctx, kubeconfigSecret(t, h.token())); err != nil {
		t.Fatal(err)
	}
	h.connected("east")
	tg, ok := h.c.Targets.Get("east")
	if !ok {
		t.Fatal("target east is not in the set")
	}
	var mu sync.Mutex
	var names []string
	h.c.Targets.OnAdd(func(t *Target) {
		mu.Lock()
		defer mu.Unlock()
		names = append(names, t.Name)
	})
	return h, tg, func() []string {
		mu.Lock()
		defer mu.Unlock()
		got := names
		names = nil
		return got
	}
}

// TestTargetOfNode: a virtual node's events go to the kind of target whose
// node it is, by its labels; a node of no target goes nowhere.
func TestTargetOfNode(t *testing.T) {
	for _, tt := range []struct {
		name                string
		labels              map[string]string
		cluster, namespaced string
	}{
		{"a ClusterTarget's", map[string]string{vnode.TargetLabel: "east"}, "/east", ""},
		{"a Target's", map[string]string{vnode.TargetLabel: "east", TargetNamespaceLabel: "team-a"}, "", "team-a/east"},
		{"no target's", map[string]string{vnode.TypeLabel: vnode.TypeValue}, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tt.labels}}
			if got := requested(targetOfNode(false)(t.Context(), node)); got != tt.cluster {
				t.Errorf("ClusterTargets: request %q, want %q", got, tt.cluster)
			}
			if got := requested(targetOfNode(true)(t.Context(), node)); got != tt.namespaced {
				t.Errorf("Targets: request %q, want %q", got, tt.namespaced)
			}
		})
	}
}

// requested is the one request of reqs as namespace/name, "" for none.
func requested(reqs []reconcile.Request) string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Namespace+"/"+r.Name)
	}
	return strings.Join(out, " ")
}
