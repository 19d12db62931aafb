package core

import (
	"encoding/json"

	v1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// ReservationEnded is the queueing hint for a candidate whose reservation
// this plugin ended (denied, deleted or timed out in Permit): it is worth
// scheduling again once the update that reports Unreserved on the pod
// itself has landed. Waiting for that write, rather than retrying at once,
// means the source sees every Unreserved before the next Reserved; no other
// cluster event changes the source's answer, so none requeues the candidate.
func ReservationEnded(pod *v1.Pod, oldObj, newObj any) bool {
	updated, ok := newObj.(*v1.Pod)
	if !ok || updated.UID != pod.UID {
		return false
	}
	var before string
	if old, ok := oldObj.(*v1.Pod); ok {
		before = old.Annotations[protocol.StateAnnotation]
	}
	after, ok := updated.Annotations[protocol.StateAnnotation]
	if !ok || after == before {
		return false
	}
	var state protocol.State
	return json.Unmarshal([]byte(after), &state) == nil && state.Phase == protocol.PhaseUnreserved
}

// DenialLifted reports whether an update of a candidate removed the
// source's denial of it (see Denied): it may reserve again.
func DenialLifted(pod *v1.Pod, oldObj, newObj any) bool {
	updated, ok := newObj.(*v1.Pod)
	old, okOld := oldObj.(*v1.Pod)
	if !ok || !okOld || updated.UID != pod.UID {
		return false
	}
	_, before := Denied(old.Labels, old.Annotations)
	_, after := Denied(updated.Labels, updated.Annotations)
	return before && !after
}
