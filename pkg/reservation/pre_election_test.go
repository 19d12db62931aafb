package reservation_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TestALoneSureCandidateIsPreElected: a pod the fan-out sends one
// candidate, to a target sure of it, is elected there before its candidate
// exists (nonce *), and the candidate carries the pre-allowance from its
// creation: once it binds, the source pod binds, with no allowance
// written after. A pre-election whose candidate finds no node is revoked
// (the candidate deleted), withdrawn, and the pod's next candidates are
// ordinary ones, elected only once reserved.
func TestALoneSureCandidateIsPreElected(t *testing.T) {
	h := newHarness(t, twoTargets())
	h.c.MaxCandidates = 2
	reservation.PublishFree(t, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100"), corev1.ResourceMemory: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("1000")})

	// A first pod teaches the agent how both targets answer: until a
	// target has answered, one candidate there is not enough.
	first := h.newSourcePod("web-0")
	h.reconcile(first)
	for _, name := range []string{"t1", "t2"} {
		if h.candidate(first, name) == nil {
			t.Fatalf("the first pod has no candidate in %s: targets that never answered are not sure", name)
		}
		if a := h.allowance(first, name); a != "" {
			t.Fatalf("the first pod's candidate in %s was created with allowance %q", name, a)
		}
		h.reserve(first, name, onNode{name: "n-" + name})
	}
	h.reconcile(first)
	e := h.election(first)
	h.bindCandidate(first, e.Target)
	h.reconcile(first)
	other := func(name string) string { return map[string]string{"t1": "t2", "t2": "t1"}[name] }

	// pre is the lone target of pod, pre-elected; it fails the test when
	// the pod was not pre-elected, or its candidate not pre-allowed.
	pre := func(pod *corev1.Pod) string {
		t.Helper()
		h.reconcile(pod)
		e := h.election(pod)
		if e.Generation != 1 || e.Nonce != protocol.AnyReservation || e.Target == "" {
			t.Fatalf("%s: election %q, want a pre-election (generation 1, nonce %s)", pod.Name, e.Encode(), protocol.AnyReservation)
		}
		want := protocol.Allowance{SourceUID: string(pod.UID), Generation: 1, Nonce: protocol.AnyReservation}.Encode()
		if got := h.allowance(pod, e.Target); got != want {
			t.Fatalf("%s: its candidate in %s carries allowance %q, want %q", pod.Name, e.Target, got, want)
		}
		if c := h.candidate(pod, other(e.Target)); c != nil {
			t.Fatalf("%s: pre-elected in %s, and a candidate in %s too", pod.Name, e.Target, other(e.Target))
		}
		return e.Target
	}

	t.Run("bound on the pre-allowance", func(t *testing.T) {
		pod := h.newSourcePod("web-1")
		in := pre(pod)
		h.reconcile(pod) // nothing reported yet: the election stands
		if e := h.election(pod); e.Nonce != protocol.AnyReservation {
			t.Fatalf("election %q moved before the candidate answered", e.Encode())
		}
		// The target's scheduler binds it on its first reservation,
		// reporting Bound alone.
		h.updateCandidate(pod, in, func(c *corev1.Pod) {
			c.Spec.NodeName = "n1"
			setState(c, protocol.State{Phase: protocol.PhaseBound, Nonce: "r1", Node: "n1"})
		})
		h.reconcile(pod)
		if got, want := h.sourcePod(pod).Spec.NodeName, h.targets[in].NodeName; got != want {
			t.Errorf("source pod bound to %q, want %q", got, want)
		}
		if e := h.election(pod); e.Generation != 1 {
			t.Errorf("election %q, want the pre-election kept", e.Encode())
		}
	})

	t.Run("a miss: revoked, withdrawn, then ordinary candidates", func(t *testing.T) {
		pod := h.newSourcePod("web-2")
		in := pre(pod)
		h.unschedulable(pod, in, "0/4 nodes are available: 4 Insufficient cpu.")
		h.reconcile(pod)
		if c := h.candidate(pod, in); c != nil {
			t.Fatalf("the pre-elected candidate that found no node is still there")
		}
		h.reconcile(pod)
		if e := h.election(pod); e.Elected() || e.Generation != 2 {
			t.Fatalf("election %q, want it withdrawn at generation 2", e.Encode())
		}
		h.reconcile(pod)
		if e := h.election(pod); e.Elected() {
			t.Fatalf("elected %q again before any candidate reserved", e.Encode())
		}
		for _, name := range []string{"t1", "t2"} {
			if a := h.allowance(pod, name); a != "" {
				t.Errorf("after the miss, its candidate in %s carries allowance %q", name, a)
			}
		}
	})
}

// TestTheOnlyTargetPreElects: a fleet of one target (a cluster that
// targets only itself, for a spot split) pre-elects too: its pod's one
// candidate was never weighed by the fan-out, which has nothing to choose
// from, but a sure target is as sure alone. Until it has answered, it is
// not.
func TestTheOnlyTargetPreElects(t *testing.T) {
	h := newHarness(t, []target.Config{{Name: "t1"}})
	h.c.MaxCandidates = 2
	reservation.PublishFree(t, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100"), corev1.ResourceMemory: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("1000")})

	first := h.newSourcePod("web-0")
	h.reconcile(first)
	if a := h.allowance(first, "t1"); h.candidate(first, "t1") == nil || a != "" {
		t.Fatalf("the first pod's candidate: allowance %q; want a candidate with none (t1 never answered)", a)
	}
	h.bindThere(first, "t1", onNode{name: "n1"})

	pod := h.newSourcePod("web-1")
	h.reconcile(pod)
	e := h.election(pod)
	want := protocol.Allowance{SourceUID: string(pod.UID), Generation: 1, Nonce: protocol.AnyReservation}.Encode()
	if e.Generation != 1 || e.Target != "t1" || e.Nonce != protocol.AnyReservation || h.allowance(pod, "t1") != want {
		t.Fatalf("election %q, allowance %q; want t1 pre-elected (allowance %q)", e.Encode(), h.allowance(pod, "t1"), want)
	}
}

// TestPreElectedUnderAPolicyThatDoesNotJudgeTheReservation: a policy that
// only weighs targets (no spread, no scoring window) leaves the lone sure
// target's pod pre-elected, as does one that selects clusters; a scoring
// window, which waits to compare reservations, and a spread, which counts
// the reserved node's domain, do not.
func TestPreElectedUnderAPolicyThatDoesNotJudgeTheReservation(t *testing.T) {
	weighs := &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "weighs"},
		Spec: v1alpha1.PlacementPolicySpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Scoring:     &v1alpha1.Scoring{SpreadWeight: ptr.To[int32](2)},
		},
	}
	window := weighs.DeepCopy()
	window.Spec.Scoring.Window = &v1alpha1.ScoringWindow{Candidates: 2, TimeoutMilliseconds: 500}
	selects := weighs.DeepCopy()
	selects.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	for _, tc := range []struct {
		name   string
		policy *v1alpha1.PlacementPolicy
		pre    bool
	}{
		{"a policy that weighs targets only", weighs, true},
		{"a policy that selects clusters", selects, true},
		{"a scoring window", window, false},
		{"a spread", zoneSpread(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, []target.Config{{Name: "t1", Labels: map[string]string{zoneKey: "a", "tier": "gold"}}}, tc.policy)
			h.c.MaxCandidates = 2
			reservation.PublishFree(t, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100"), corev1.ResourceMemory: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("1000")})
			// A first pod teaches the agent how the target answers.
			first := h.newSourcePod("web-0")
			h.reconcile(first)
			h.bindThere(first, "t1", onNode{name: "n1", zone: "a"})

			pod := h.newSourcePod("web-1")
			h.reconcile(pod)
			e := h.election(pod)
			if got := e.Nonce == protocol.AnyReservation; got != tc.pre {
				t.Fatalf("election %q: pre-elected %v, want %v", e.Encode(), got, tc.pre)
			}
			if h.candidate(pod, "t1") == nil {
				t.Fatal("no candidate in t1")
			}
		})
	}
}

// bindThere plays pod's candidate in target reserving n, the agent's
// election of it, and its binding, each looked at by the agent.
func (h *harness) bindThere(pod *corev1.Pod, target string, n onNode) {
	h.t.Helper()
	h.reserve(pod, target, n)
	h.reconcile(pod)
	h.bindCandidate(pod, target)
	h.reconcile(pod)
}
