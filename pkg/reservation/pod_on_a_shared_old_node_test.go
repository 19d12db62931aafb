package reservation_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TestPodOnASharedOldNodeKeepsItsDelegate: Target b of namespace default
// and ClusterTarget default-b had one virtual node, flotilla-default-b,
// before names were one-to-one. A pod elected for the Target and bound to
// that node keeps its delegate there: the cleanup of a bound pod finds its
// target by its election, not by its node's name, and deletes its
// candidate in the ClusterTarget instead.
func TestPodOnASharedOldNodeKeepsItsDelegate(t *testing.T) {
	const tenant, cluster = namespace + "/b", namespace + "-b"
	h := newHarness(t, []target.Config{{Name: tenant, Namespace: namespace}, {Name: cluster}})
	old := protocol.LegacyVirtualNodeName(namespace, "b")
	if old != h.targets[cluster].NodeName {
		t.Fatalf("premise: the Target's old node %s is not the ClusterTarget's node %s", old, h.targets[cluster].NodeName)
	}
	pod := h.newSourcePod("web-0")
	h.reconcile(pod) // fan-out
	if h.candidate(pod, tenant) == nil || h.candidate(pod, cluster) == nil {
		t.Fatal("want a candidate in each target")
	}
	// h.reserve's nonce would hold the Target's '/'.
	h.updateCandidate(pod, tenant, func(c *corev1.Pod) {
		setState(c, protocol.State{Phase: protocol.PhaseReserved, Nonce: "tenant-n1", Node: "n1", Score: 90})
	})
	h.reserve(pod, cluster, onNode{name: "n2", score: 10})
	h.reconcile(pod)
	if e := h.election(pod); e.Target != tenant {
		t.Fatalf("election %s, want %s", e.Encode(), tenant)
	}
	h.bindCandidate(pod, tenant)

	// Bound as an agent before the upgrade bound it: to the old node.
	src := h.sourcePod(pod)
	src.Spec.NodeName = old
	if err := h.source.Tracker().Update(podsResource, src, src.Namespace); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		h.reconcile(pod)
	}
	if h.candidate(pod, tenant) == nil {
		t.Errorf("the delegate in %s, which runs the pod, was deleted", tenant)
	}
	if h.candidate(pod, cluster) != nil {
		t.Errorf("the candidate in %s, reserved and not elected, is still there", cluster)
	}
	if got := h.sourcePod(pod).Spec.NodeName; got != old {
		t.Errorf("source pod on %s, want still %s", got, old)
	}
}
