package core

import (
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Several replicas of a scheduler may act on one candidate at once: a
// leader frozen (a long pause, a stopped VM) loses its lease, another takes
// over and reports the reservation it finds lost, and the old one resumes
// still holding that reservation in Permit before it notices. Every write of
// the scheduler to a candidate is therefore a compare-and-swap: it is judged
// against a copy of the candidate (the two functions below) and sent with
// that copy's resourceVersion as its precondition, so it lands only on the
// very version it was judged against. Of a bind and a report that the
// reservation was lost, made against one version, exactly one lands.

// reportedState returns the state the candidate reports, if it reports one
// that parses.
func reportedState(pod *v1.Pod) (protocol.State, bool) {
	raw, ok := pod.Annotations[protocol.StateAnnotation]
	if !ok {
		return protocol.State{}, false
	}
	var s protocol.State
	if json.Unmarshal([]byte(raw), &s) != nil {
		return protocol.State{}, false
	}
	return s, true
}

// StateLands says why state may not be written over the candidate as
// current has it, or "" when it may:
//   - Bound always lands (the pod is bound: nothing is left to protect).
//   - Nothing else lands on a bound candidate: a Reserved or Unreserved
//     report over a binding would tell the source that the candidate it
//     runs is free, and it would elect another.
//   - The report that a reservation is lost (ReasonReservationLost) lands
//     only while the candidate still reports that very reservation as
//     Reserved: once anything else replaced it, there is nothing lost to
//     report.
//
// Any other Unreserved lands, even over another scheduler's Reserved: that
// costs the other reservation its bind (Bindable), which it then reports
// ended, while a dropped Unreserved would leave the candidate out of the
// queue (ReservationEnded waits for it to land).
func StateLands(state protocol.State, current *v1.Pod) string {
	if state.Phase == protocol.PhaseBound {
		return ""
	}
	if current.Spec.NodeName != "" {
		return fmt.Sprintf("the candidate is bound to node %s", current.Spec.NodeName)
	}
	reported, ok := reportedState(current)
	if state.Phase == protocol.PhaseUnreserved && state.Reason == ReasonReservationLost {
		if !ok || reported.Phase != protocol.PhaseReserved || reported.Nonce != state.Nonce {
			return fmt.Sprintf("the candidate no longer reports reservation %s as Reserved", state.Nonce)
		}
	}
	return ""
}

// Bindable says why the reservation named by nonce, on node, may not bind
// the candidate as current has it, or "" when it may: the candidate is not
// bound nor being deleted, still reports that reservation as Reserved on
// that node (no other scheduler reported it lost or replaced it), and its
// source allows it (Decide). A pre-allowed candidate (PreAllowed) reports
// no reservation: it may bind unless it reports another one Reserved (a
// scheduler that did not know pre-allowances holds it); the Binding's
// precondition still makes two schedulers' binds of one version land once.
func Bindable(nonce, node string, current *v1.Pod) string {
	if current.Spec.NodeName != "" {
		return fmt.Sprintf("the candidate is already bound to node %s", current.Spec.NodeName)
	}
	if current.DeletionTimestamp != nil {
		return "the candidate is being deleted"
	}
	reported, ok := reportedState(current)
	if PreAllowed(current.Labels, current.Annotations) {
		if ok && reported.Phase == protocol.PhaseReserved && (reported.Nonce != nonce || reported.Node != node) {
			return fmt.Sprintf("the candidate reports reservation %s on node %s as Reserved, not this one", reported.Nonce, reported.Node)
		}
		return ""
	}
	if !ok || reported.Phase != protocol.PhaseReserved || reported.Nonce != nonce || reported.Node != node {
		return fmt.Sprintf("the candidate no longer reports reservation %s on node %s as Reserved (another scheduler replaced or ended it)", nonce, node)
	}
	if d := Decide(nonce, current.Labels, current.Annotations); d.Verdict != Allow {
		if d.Reason != "" {
			return d.Reason
		}
		return fmt.Sprintf("the candidate no longer carries the source's allowance of reservation %s", nonce)
	}
	return ""
}
