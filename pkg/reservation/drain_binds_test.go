package reservation_test

import (
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TestDrainBindsTheRunningCopy: a pod elected in a target that is then
// deleted (drained), whose candidate there bound before the source pod
// did, is bound to that target's virtual node: the candidate is its
// running copy. Releasing the election there would elect the pod again
// elsewhere while its copy still runs.
func TestDrainBindsTheRunningCopy(t *testing.T) {
	h := newHarness(t, twoTargets())
	pod := h.newSourcePod("web-0")
	h.reconcile(pod)
	h.reserve(pod, "t1", onNode{name: "n1", score: 90})
	h.reconcile(pod)
	if e := h.election(pod); e.Target != "t1" {
		t.Fatalf("elected %q, want t1", e.Target)
	}
	h.bindCandidate(pod, "t1")
	// The target is deleted before the source binds its pod: out of the
	// set, its waiting candidates deleted (none), marked drained.
	t1 := h.targets["t1"].Target
	h.c.Targets.Drain(t1)
	h.c.Targets.MarkDrained("t1")
	h.reconcile(pod)
	if got := h.sourcePod(pod).Spec.NodeName; got != target.NodeNameOf("t1") {
		t.Fatalf("source pod on %q, want the drained target's virtual node %s", got, target.NodeNameOf("t1"))
	}
	if e := h.election(pod); e.Target != "t1" {
		t.Fatalf("election %s, want it kept in t1", e.Encode())
	}
	if c := h.candidate(pod, "t1"); c == nil || c.DeletionTimestamp != nil {
		t.Fatal("the running copy in t1 was deleted")
	}
}
