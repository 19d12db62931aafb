package local

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/summary"
)

func node(name, cpu string, mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "a"}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(cpu),
				corev1.ResourceMemory: resource.MustParse("8Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func pod(namespace, name, cpu, nodeName string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			NodeName: nodeName,
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
			}}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func free(n *corev1.Node, used ...*corev1.Pod) Node {
	f := summary.AllocatableOf(n)
	for _, p := range used {
		f = f.Less(summary.RequestsOf(p))
	}
	return Node{Node: n, Free: f}
}

func TestFits(t *testing.T) {
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	virtual := func(n *corev1.Node) { n.Labels["type"] = "virtual-kubelet" }
	notReady := func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }
	tainted := func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "gpu", Value: "yes", Effect: corev1.TaintEffectNoSchedule}}
	}
	tolerates := func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoSchedule}}
	}
	zoneB := func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "b"} }
	zoneA := func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "a"} }
	one := pod("ns", "p", "1", "")
	cases := []struct {
		name    string
		pod     *corev1.Pod
		nodes   []Node
		claimed string
		fits    bool
	}{
		{name: "a node with room", pod: one, nodes: []Node{free(node("n1", "2"))}, fits: true},
		{name: "no node", pod: one, fits: false},
		{name: "full node", pod: one, nodes: []Node{free(node("n1", "2"), pod("ns", "a", "1500m", "n1"))}, fits: false},
		{name: "room on the second node", pod: one, nodes: []Node{free(node("n1", "2"), pod("ns", "a", "1500m", "n1")), free(node("n2", "2"))}, fits: true},
		{name: "enough in total but on no single node", pod: one, nodes: []Node{free(node("n1", "600m")), free(node("n2", "600m"))}, fits: false},
		{name: "cordoned", pod: one, nodes: []Node{free(node("n1", "2", cordoned))}, fits: false},
		{name: "virtual node", pod: one, nodes: []Node{free(node("n1", "64", virtual))}, fits: false},
		{name: "not ready", pod: one, nodes: []Node{free(node("n1", "2", notReady))}, fits: false},
		{name: "untolerated taint", pod: one, nodes: []Node{free(node("n1", "2", tainted))}, fits: false},
		{name: "tolerated taint", pod: pod("ns", "p", "1", "", tolerates), nodes: []Node{free(node("n1", "2", tainted))}, fits: true},
		{name: "selector matches no node", pod: pod("ns", "p", "1", "", zoneB), nodes: []Node{free(node("n1", "2"))}, fits: false},
		{name: "selector matches", pod: pod("ns", "p", "1", "", zoneA), nodes: []Node{free(node("n1", "2"))}, fits: true},
		{name: "room claimed by pods not bound yet", pod: one, nodes: []Node{free(node("n1", "2"))}, claimed: "1500m", fits: false},
		{name: "room left after the claims", pod: one, nodes: []Node{free(node("n1", "2")), free(node("n2", "2"))}, claimed: "2", fits: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var claimed summary.Amounts
			if tc.claimed != "" {
				claimed = summary.RequestsOf(pod("ns", "claims", tc.claimed, ""))
			}
			v := Fits(tc.pod, summary.RequestsOf(tc.pod), slices.Values(tc.nodes), claimed)
			if v.Fits != tc.fits {
				t.Fatalf("Fits = %v (%s), want %v", v.Fits, v.Reason, tc.fits)
			}
			if v.Reason == "" {
				t.Error("no reason given")
			}
		})
	}
}

// viewOf is a View over the given nodes, synced, its pods fed by hand as
// its informer would.
func viewOf(t testing.TB, clk *clocktesting.FakeClock, nodes ...*corev1.Node) *View {
	t.Helper()
	v := newView(clk)
	for _, n := range nodes {
		trimmed, _ := summary.TrimNode(n)
		v.nodeChanged(nil, trimmed)
	}
	close(v.synced)
	return v
}

func usage(p *corev1.Pod) any {
	s, _ := trimPod(p)
	return s
}

func TestViewCountsPodsAndClaims(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	v := viewOf(t, clk, node("n1", "2"))
	p := pod("ns", "p", "1", "")

	if got := newView(clk).Claim(p, true); got.Fits {
		t.Fatal("a view that has not listed the cluster kept a pod")
	}
	if !v.Claim(p, true).Fits {
		t.Fatal("first pod: want room")
	}
	if !v.Claim(p, false).Fits {
		t.Fatal("second pod, not held: want room (one core left)")
	}
	if !v.Claim(p, true).Fits {
		t.Fatal("second pod: want room (one core left)")
	}
	if v.Claim(p, true).Fits {
		t.Fatal("third pod: the two claims hold both cores")
	}
	// The first pod is created: its claim ends, the pod holds the room
	// while it waits for the scheduler, then on its node.
	pending := usage(pod("ns", "a", "1", ""))
	v.podChanged(nil, pending)
	if len(v.claims) != 1 {
		t.Fatalf("claims after the first pod was seen: %d, want 1", len(v.claims))
	}
	if v.Claim(p, false).Fits {
		t.Fatal("a pending pod and a claim hold both cores")
	}
	bound := usage(pod("ns", "a", "1", "n1"))
	v.podChanged(pending, bound)
	if v.pending != (summary.Amounts{}) {
		t.Fatalf("pending after binding: %+v, want none", v.pending)
	}
	if v.Claim(p, false).Fits {
		t.Fatal("a bound pod and a claim hold both cores")
	}
	// The second admission's create never came: its claim lapses.
	clk.Step(DefaultClaimTTL + time.Second)
	if !v.Claim(p, false).Fits {
		t.Fatal("after the claim lapsed: want room for one more")
	}
	// The bound pod ends (it leaves the watch): its node is free again.
	v.podChanged(bound, nil)
	if len(v.used) != 0 {
		t.Fatalf("used after the pod ended: %v, want none", v.used)
	}
	if !v.Claim(pod("ns", "p", "2", ""), false).Fits {
		t.Fatal("an empty node of 2 cores: want room for 2")
	}
}

func TestClaimsEndByNamespaceAndRequests(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	v := viewOf(t, clk, node("n1", "4"))
	v.Claim(pod("ns", "p", "1", ""), true)
	v.Claim(pod("other", "p", "1", ""), true)
	// A pod of another size, or of another namespace, is not the claim's.
	v.podChanged(nil, usage(pod("ns", "x", "500m", "")))
	v.podChanged(nil, usage(pod("third", "y", "1", "")))
	if len(v.claims) != 2 {
		t.Fatalf("claims: %d, want 2", len(v.claims))
	}
	v.podChanged(nil, usage(pod("other", "z", "1", "")))
	if len(v.claims) != 1 || v.claims[0].namespace != "ns" {
		t.Fatalf("claims: %+v, want the one of ns", v.claims)
	}
}

// TestUnschedulablePodsHoldNothing: a pod its scheduler found no node for
// (a selector no node matches, say) may wait for ever; counted, it would
// keep every pod after it out of a cluster with room.
func TestUnschedulablePodsHoldNothing(t *testing.T) {
	v := viewOf(t, clocktesting.NewFakeClock(time.Now()), node("n1", "2"))
	stuck := pod("ns", "stuck", "1500m", "", func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	})
	v.podChanged(nil, usage(stuck))
	if !v.Claim(pod("ns", "p", "1", ""), false).Fits {
		t.Fatal("a pod no node was found for took the room")
	}
	waiting := pod("ns", "waiting", "1500m", "")
	v.podChanged(nil, usage(waiting))
	if v.Claim(pod("ns", "p", "1", ""), false).Fits {
		t.Fatal("a pod waiting for its scheduler holds no room")
	}
}

// TestViewFree: the room of the nodes that take pods, less what the pods
// bound there use, the pending pods ask and the claims hold.
func TestViewFree(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	if _, ok := newView(clk).Free(); ok {
		t.Fatal("a view that has not listed the cluster gave its room")
	}
	v := viewOf(t, clk, node("n1", "4"), node("n2", "2"),
		node("cordoned", "8", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		node("notready", "8", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }),
		node("virtual", "8", func(n *corev1.Node) { n.Labels["type"] = "virtual-kubelet" }))
	v.podChanged(nil, usage(pod("ns", "bound", "1", "n1")))
	v.podChanged(nil, usage(pod("ns", "pending", "500m", "")))
	v.Claim(pod("ns", "claimed", "500m", ""), true)
	free, ok := v.Free()
	if !ok {
		t.Fatal("a synced view gave no room")
	}
	if got := free[corev1.ResourceCPU]; got.MilliValue() != 4000 {
		t.Errorf("cpu free = %s, want 4 (6 on n1 and n2, less 1 bound, 0.5 pending, 0.5 claimed)", got.String())
	}
	if got := free[corev1.ResourcePods]; got.Value() != 220-3 {
		t.Errorf("pods free = %s, want 217", got.String())
	}
	clk.Step(DefaultClaimTTL)
	if free, _ := v.Free(); free.Cpu().MilliValue() != 4500 {
		t.Errorf("cpu free after the claim lapsed = %s, want 4.5", free.Cpu().String())
	}
	// A candidate not bound takes no room as placement weighs this
	// cluster (a ClusterSummary counts bound pods only: a gang whose
	// candidates wait here would find the room they wait for taken), but
	// a pod kept here finds the room it holds in Permit taken; bound, it
	// takes its node's room.
	cand := pod("ns", "candidate", "4", "", func(p *corev1.Pod) { p.Labels = map[string]string{protocol.CandidateLabel: "true"} })
	v.podChanged(nil, usage(cand))
	if free, _ := v.Free(); free.Cpu().MilliValue() != 4500 {
		t.Errorf("cpu free with a candidate of 4 waiting = %s, want 4.5", free.Cpu().String())
	}
	if v.Claim(pod("ns", "kept", "1", ""), false).Fits {
		t.Error("a pod kept here fits the room a waiting candidate holds")
	}
	bound := cand.DeepCopy()
	bound.Spec.NodeName = "n1"
	v.podChanged(usage(cand), usage(bound))
	if free, _ := v.Free(); free.Cpu().MilliValue() != 1500 {
		t.Errorf("cpu free with the candidate bound on n1 = %s, want 1.5", free.Cpu().String())
	}
	v.podChanged(usage(bound), nil)
	if free, _ := v.Free(); free.Cpu().MilliValue() != 4500 {
		t.Errorf("cpu free once the candidate is gone = %s, want 4.5", free.Cpu().String())
	}
}

// TestViewKeepsFreeAsNodesAndPodsChange: the free room the view keeps as
// events come is what its nodes and pods add up to, whatever their order:
// pods bound before their node is seen, nodes cordoned, made NotReady,
// resized and deleted under their pods, pods moved in and out.
func TestViewKeepsFreeAsNodesAndPodsChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	v := viewOf(t, clocktesting.NewFakeClock(time.Now()))
	nodes := map[string]*corev1.Node{}
	pods := map[string]any{}
	recount := func() summary.Amounts {
		var want summary.Amounts
		for _, n := range nodes {
			if takesPods(n) {
				want = want.Plus(summary.AllocatableOf(n).Less(v.used[n.Name]))
			}
		}
		return want
	}
	for step := range 2000 {
		name := fmt.Sprintf("n%d", rng.IntN(5))
		switch rng.IntN(4) {
		case 0: // a node comes, changes or goes
			var n *corev1.Node
			if rng.IntN(4) > 0 {
				n = node(name, fmt.Sprintf("%d", 1+rng.IntN(8)), func(n *corev1.Node) {
					n.Spec.Unschedulable = rng.IntN(4) == 0
					if rng.IntN(4) == 0 {
						n.Status.Conditions[0].Status = corev1.ConditionFalse
					}
				})
			}
			var old any
			if o, ok := nodes[name]; ok {
				old = o
			}
			if n == nil {
				delete(nodes, name)
				v.nodeChanged(old, nil)
			} else {
				nodes[name] = n
				v.nodeChanged(old, n)
			}
		default: // a pod comes, changes node or goes
			key := fmt.Sprintf("p%d", rng.IntN(20))
			var p any
			if rng.IntN(3) > 0 {
				p = usage(pod("ns", key, fmt.Sprintf("%dm", 100*(1+rng.IntN(20))), name))
			}
			v.podChanged(pods[key], p)
			if p == nil {
				delete(pods, key)
			} else {
				pods[key] = p
			}
		}
		if want := recount(); v.free != want {
			t.Fatalf("step %d: the view keeps %v free, its nodes and pods add up to %v", step, v.free, want)
		}
	}
}

// BenchmarkClaim is one admission's look at a cluster of 5,000 nodes, each
// holding a pod: for a pod that fits (the look stops at the first node with
// room), and for one whose selector no node matches (every node is looked
// at).
func BenchmarkClaim(b *testing.B) {
	v := viewOf(b, clocktesting.NewFakeClock(time.Now()))
	for i := range 5000 {
		n := fmt.Sprintf("n%d", i)
		v.nodeChanged(nil, node(n, "64"))
		v.podChanged(nil, usage(pod("ns", "bound-"+n, "1", n)))
	}
	for _, bc := range []struct {
		name, zone string
		fits       bool
	}{{"fits", "a", true}, {"no node matches", "b", false}} {
		p := pod("ns", "p", "100m", "", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": bc.zone} })
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if v.Claim(p, false).Fits != bc.fits {
					b.Fatalf("Claim of a pod of zone %s: want fits %t", bc.zone, bc.fits)
				}
			}
		})
	}
}

// TestNewViewCountsWhatItLists: a view of a cluster started over its API
// (a fake clientset) counts, once Synced, the nodes and pods it listed: its
// handlers are wired to its informers.
func TestNewViewCountsWhatItLists(t *testing.T) {
	kube := fake.NewClientset(node("n1", "4"), pod("ns", "bound", "1", "n1"), pod("ns", "pending", "500m", ""))
	v := NewView(kube)
	ctx := run(t, v)
	v.Want()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return v.Synced(), nil
	}); err != nil {
		t.Fatal("the view never synced")
	}
	free, _ := v.Free()
	if got := free[corev1.ResourceCPU]; got.MilliValue() != 2500 {
		t.Errorf("cpu free = %s, want 2.5 (4 on n1, less 1 bound and 0.5 pending)", got.String())
	}
}

// TestWeighStartsTheView: placement weighing a self target asks for the
// view, localFirst or not: its room is unknown until the view has listed
// the cluster, and known after, where a view nothing asked for stayed
// unknown for good.
func TestWeighStartsTheView(t *testing.T) {
	kube := fake.NewClientset(node("n1", "4"), pod("ns", "bound", "1", "n1"))
	v := NewView(kube)
	ctx := run(t, v)
	if v.Wanted() {
		t.Fatal("a new view is wanted before anything asked")
	}
	var free corev1.ResourceList
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var ok bool
		free, ok = v.Weigh()
		return ok, nil
	}); err != nil {
		t.Fatal("the room of a self target weighed by placement stayed unknown")
	}
	if got := free[corev1.ResourceCPU]; got.MilliValue() != 3000 {
		t.Errorf("cpu free = %s, want 3 (4 on n1, less 1 bound)", got.String())
	}
}

// run starts r until the test ends, and returns the context it runs in.
func run(t *testing.T, r interface{ Start(context.Context) error }) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ctx
}
