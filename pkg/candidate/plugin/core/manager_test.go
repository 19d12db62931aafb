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
		nonce, err := m.Reserve(ctx, pod, "node-1", 50)
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
		if want := (protocol.State{Phase: protocol.PhaseBound, Nonce: nonce, Node: "node-1"}); st != want {
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
		if got, want := pendingPhase(w), (protocol.State{Phase: protocol.PhaseBound, Nonce: nonce, Node: "node-1"}); got != want {
			t.Errorf("PostBind queued %+v, want %+v", got, want)
		}
	})
}
