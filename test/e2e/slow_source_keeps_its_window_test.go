package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestSlowSourceKeepsItsWindow pauses the agent, which gives one candidate
// per pod (placement.maxCandidates=1) over three targets, for longer than the
// Permit timeout of the target its candidate waits in: the candidate comes
// back with the timeout's Unschedulable condition (and reserves again), which
// is waiting for the source, not failing. Resumed, the source places the pod
// there and never sends a candidate to another target: a timeout in Permit
// does not widen the window.
func TestSlowSourceKeepsItsWindow(t *testing.T) {
	t.Parallel()
	const permitTimeout = 2
	spec := func(name string) sandbox.ClusterSpec {
		return sandbox.ClusterSpec{Name: name, Nodes: []sandbox.NodeSpec{{CPU: "4"}}, PermitTimeoutSeconds: permitTimeout}
	}
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true}, spec("w1"), spec("w2"), spec("w3"),
	}})
	ctx := t.Context()
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	src := s.Cluster("src")
	targets := []*sandbox.Cluster{s.Cluster("w1"), s.Cluster("w2"), s.Cluster("w3")}
	// The pause must not cost the agent its lease: it would exit on resume.
	agent, err := sandbox.StartAgent(ctx, src, targets, "agent.maxCandidates=1",
		"agent.leaderElection.leaseDuration=120s", "agent.leaderElection.renewDeadline=90s")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range targets {
		if err := c.Stop(sandbox.CandidateScheduler); err != nil {
			t.Fatal(err)
		}
	}
	seen := watchCandidates(t, targets, "slow")
	srcPods := src.Client().CoreV1().Pods(placementNS)
	pod, err := srcPods.Create(ctx, optedInPod("slow", "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := s.Cluster(firstChoice(t, pod, targets))
	name := protocol.CandidateName("src", first.Name, placementNS, pod.Name, string(pod.UID))
	waitPod(t, first.Client(), placementNS, name, "sent, unscheduled", func(p *corev1.Pod) bool { return p.Spec.NodeName == "" })
	for _, c := range targets {
		if c != first {
			if err := c.Start(ctx, sandbox.CandidateScheduler); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The source is slow: its candidate is reserved, and its Permit times
	// out, while the agent is stopped.
	if err := agent.Pause(); err != nil {
		t.Fatal(err)
	}
	pausedAt, paused := time.Now(), true
	t.Cleanup(func() {
		if paused {
			_ = agent.Resume()
		}
	})
	if err := first.Start(ctx, sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	waitPod(t, first.Client(), placementNS, name, "timed out in Permit and reserved again", func(p *corev1.Pod) bool {
		var st protocol.State
		_ = json.Unmarshal([]byte(p.Annotations[protocol.StateAnnotation]), &st)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, "timeout") {
				return st.Phase == protocol.PhaseReserved
			}
		}
		return false
	})
	if err := agent.Resume(); err != nil {
		t.Fatal(err)
	}
	paused = false
	t.Logf("the agent was paused for %s", time.Since(pausedAt).Round(time.Millisecond))

	want := protocol.VirtualNodeName("", first.Name)
	sources := waitSourcePods(t, src.Client(), "app=slow", 1, func(p *corev1.Pod) bool {
		return p.Spec.NodeName == want && p.Status.Phase == corev1.PodRunning
	})
	waitFor(t, 60*time.Second, "one delegate, in "+first.Name, func() (bool, string) {
		return checkOneDelegateEach(ctx, s, sources)
	})
	if elsewhere := seen.where(func(v candidateVersion) bool { return v.cluster != first.Name }); len(elsewhere) > 0 {
		t.Errorf("the window widened: candidates appeared outside %s, the pod's first choice: %v", first.Name, elsewhere)
	}
}
