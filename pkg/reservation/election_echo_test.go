package reservation

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestElectionEcho: the cache's event of the pod this process's election
// write returned is its echo, whose round may wait for the next change;
// another version of the pod is not, and neither is the echo a round
// awaits (it found the cache without the election): that pod would wait a
// second for nothing.
func TestElectionEcho(t *testing.T) {
	m := &memory{}
	pod := func(rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", ResourceVersion: rv}}
	}
	if m.electionEcho(pod("7")) {
		t.Error("a pod with no election written is an echo")
	}
	m.noteElection("u1", writtenElection{value: "t1/1/n", at: time.Now(), rv: "7"})
	if !m.electionEcho(pod("7")) {
		t.Error("the pod the election write returned is not its echo")
	}
	if m.electionEcho(pod("8")) {
		t.Error("a later version of the pod (someone else's write) is an echo")
	}
	m.awaitElection("u1")
	if m.electionEcho(pod("7")) {
		t.Error("the echo a stale round awaits waits all the same")
	}
	m.noteElection("u1", writtenElection{value: "t1/2/n", at: time.Now()})
	if m.electionEcho(pod("")) {
		t.Error("a write whose resourceVersion is unknown makes an echo of a pod without one")
	}
}
