package core

import (
	"encoding/json"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func TestReservationEnded(t *testing.T) {
	withState := func(uid types.UID, state *protocol.State, raw string) *v1.Pod {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: uid, Annotations: map[string]string{}}}
		if state != nil {
			b, _ := json.Marshal(state)
			raw = string(b)
		}
		if raw != "" {
			pod.Annotations[protocol.StateAnnotation] = raw
		}
		return pod
	}
	reserved := &protocol.State{Phase: protocol.PhaseReserved, Nonce: "n1", Node: "node"}
	unreserved := &protocol.State{Phase: protocol.PhaseUnreserved, Nonce: "n1", Node: "node", Reason: "denied"}
	queued := withState("uid", reserved, "")

	tests := []struct {
		name     string
		old, new any
		want     bool
	}{
		{name: "unreserved lands", old: withState("uid", reserved, ""), new: withState("uid", unreserved, ""), want: true},
		{name: "unreserved lands on a pod without old object", old: nil, new: withState("uid", unreserved, ""), want: true},
		{name: "reserved lands", old: withState("uid", unreserved, ""), new: withState("uid", reserved, "")},
		{name: "unrelated update of an unreserved pod", old: withState("uid", unreserved, ""), new: withState("uid", unreserved, "")},
		{name: "another pod", old: withState("other", reserved, ""), new: withState("other", unreserved, "")},
		{name: "malformed state", old: withState("uid", reserved, ""), new: withState("uid", nil, "{not json")},
		{name: "state removed", old: withState("uid", unreserved, ""), new: withState("uid", nil, "")},
		{name: "not a pod", old: &v1.Node{}, new: &v1.Node{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ReservationEnded(queued, tt.old, tt.new); got != tt.want {
				t.Errorf("ReservationEnded = %v, want %v", got, tt.want)
			}
		})
	}
}
