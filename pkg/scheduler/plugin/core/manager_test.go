package core

import (
	"context"
	"encoding/json"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestBoundReport checks that a binding made by the plugin carries the Bound
// state of the reservation it binds, and that PostBind then writes nothing;
// when another binder bound the candidate, PostBind reports Bound itself.
func TestBoundReport(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c"}}
	ctx := context.Background()
	// reserve returns a manager holding a reservation of pod on node-1.
	reserve := func(t *testing.T) (*StateWriter, *Manager, string) {
		w := NewStateWriter("test", newRecordingPatcher(nil), nil)
		m := NewManager(Options{PluginName: "p", SchedulerName: "s"}, nil, nil, w)
		nonce, err := m.Reserve(ctx, pod, "node-1", nil, 50)
		if err != nil {
			t.Fatal(err)
		}
		return w, m, nonce
	}
	pendingPhase := func(w *StateWriter) protocol.State {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.pending[pod.UID].state
	}

	t.Run("the binding carries it", func(t *testing.T) {
		w, m, nonce := reserve(t)
		annotations, err := m.BindingAnnotations(pod, "node-1")
		if err != nil {
			t.Fatal(err)
		}
		var st protocol.State
		if err := json.Unmarshal([]byte(annotations[protocol.StateAnnotation]), &st); err != nil {
			t.Fatalf("binding's state annotation %q: %v", annotations[protocol.StateAnnotation], err)
		}
		if want := (protocol.State{Phase: protocol.PhaseBound, Nonce: nonce, Node: "node-1"}); !equalState(st, want) {
			t.Errorf("binding reports %+v, want %+v", st, want)
		}
		m.BoundReported(pod)
		m.Bound(ctx, pod, "node-1")
		if got := pendingPhase(w); got.Phase != protocol.PhaseReserved {
			t.Errorf("after a binding that reported Bound, PostBind queued %+v: a second write", got)
		}
	})

	t.Run("another binder bound it", func(t *testing.T) {
		w, m, nonce := reserve(t)
		m.Bound(ctx, pod, "node-1")
		if got, want := pendingPhase(w), (protocol.State{Phase: protocol.PhaseBound, Nonce: nonce, Node: "node-1"}); !equalState(got, want) {
			t.Errorf("PostBind queued %+v, want %+v", got, want)
		}
	})
}

// TestReschedulingReportsALostReservation checks that a candidate scheduled
// again while its state still says Reserved, with a reservation this
// scheduler does not hold (an earlier instance's), is reported Unreserved:
// otherwise the source waits forever on an election no scheduler will end.
func TestReschedulingReportsALostReservation(t *testing.T) {
	ctx := context.Background()
	withState := func(s string) *v1.Pod {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c"}}
		if s != "" {
			pod.Annotations = map[string]string{protocol.StateAnnotation: s}
		}
		return pod
	}
	for _, tt := range []struct {
		name  string
		state string
		hold  bool // this scheduler holds the reported reservation
		want  *protocol.State
	}{
		{"no state", "", false, nil},
		{"reserved by an earlier scheduler", `{"phase":"Reserved","nonce":"n1","node":"node-1"}`, false,
			&protocol.State{Phase: protocol.PhaseUnreserved, Nonce: "n1", Node: "node-1", Reason: ReasonReservationLost}},
		{"already unreserved", `{"phase":"Unreserved","nonce":"n1"}`, false, nil},
		{"bound", `{"phase":"Bound","nonce":"n1","node":"node-1"}`, false, nil},
		{"malformed", `{"phase":`, false, nil},
		{"held by this scheduler", "", true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := NewStateWriter("test", newRecordingPatcher(nil), nil)
			m := NewManager(Options{PluginName: "p", SchedulerName: "s"}, nil, nil, w)
			pod := withState(tt.state)
			if tt.hold {
				nonce, err := m.Reserve(ctx, pod, "node-1", nil, 1)
				if err != nil {
					t.Fatal(err)
				}
				pod = withState(`{"phase":"Reserved","nonce":"` + nonce + `","node":"node-1"}`)
				w.mu.Lock()
				delete(w.pending, pod.UID)
				w.mu.Unlock()
			}
			m.Rescheduling(ctx, pod)
			w.mu.Lock()
			got, ok := w.pending[pod.UID]
			w.mu.Unlock()
			switch {
			case tt.want == nil && ok:
				t.Errorf("queued %+v, want nothing", got.state)
			case tt.want != nil && !ok:
				t.Errorf("queued nothing, want %+v", *tt.want)
			case tt.want != nil && !equalState(got.state, *tt.want):
				t.Errorf("queued %+v, want %+v", got.state, *tt.want)
			}
		})
	}
}
