package core

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// recordingPatcher stands in for the API server: it records every write per
// pod, notices two concurrent writes of one pod, and answers with respond.
type recordingPatcher struct {
	respond func(pod PodRef, state protocol.State, call int) error

	mu       sync.Mutex
	calls    map[types.UID][]protocol.State
	inflight map[types.UID]bool
	overlap  bool
}

func newRecordingPatcher(respond func(PodRef, protocol.State, int) error) *recordingPatcher {
	return &recordingPatcher{respond: respond, calls: map[types.UID][]protocol.State{}, inflight: map[types.UID]bool{}}
}

func (p *recordingPatcher) PatchState(_ context.Context, pod PodRef, state protocol.State) error {
	p.mu.Lock()
	if p.inflight[pod.UID] {
		p.overlap = true
	}
	p.inflight[pod.UID] = true
	p.calls[pod.UID] = append(p.calls[pod.UID], state)
	call := len(p.calls[pod.UID])
	p.mu.Unlock()

	var err error
	if p.respond != nil {
		err = p.respond(pod, state, call)
	}
	p.mu.Lock()
	p.inflight[pod.UID] = false
	p.mu.Unlock()
	return err
}

func (p *recordingPatcher) written(uid types.UID) []protocol.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]protocol.State(nil), p.calls[uid]...)
}

var (
	podA = PodRef{Namespace: "ns", Name: "a", UID: "uid-a"}
	podB = PodRef{Namespace: "ns", Name: "b", UID: "uid-b"}

	reserved1   = protocol.State{Phase: protocol.PhaseReserved, Nonce: "n1", Node: "node-1", Score: 90}
	unreserved1 = protocol.State{Phase: protocol.PhaseUnreserved, Nonce: "n1", Node: "node-1", Reason: "denied by source"}
	reserved2   = protocol.State{Phase: protocol.PhaseReserved, Nonce: "n2", Node: "node-2", Score: 80}
	bound2      = protocol.State{Phase: protocol.PhaseBound, Nonce: "n2", Node: "node-2"}
)

func fastLimiter() workqueue.TypedRateLimiter[types.UID] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](time.Millisecond, 10*time.Millisecond)
}

func runWriter(t *testing.T, w *StateWriter, workers int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { w.Run(ctx, workers); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitDrained(t *testing.T, w *StateWriter) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return w.Pending() == 0, nil
	})
	if err != nil {
		t.Fatalf("writer still holds %d states: %v", w.Pending(), err)
	}
}

func TestStateWriter(t *testing.T) {
	serverError := apierrors.NewInternalError(errors.New("etcd is sad"))
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "a")
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "a", errors.New("uid mismatch"))

	tests := []struct {
		name    string
		respond func(PodRef, protocol.State, int) error
		// before are set before the workers start; they coalesce.
		before []protocol.State
		// first is set once workers run; during its write, during are set.
		first  *protocol.State
		during []protocol.State
		want   []protocol.State
	}{
		{
			name:   "only the latest of a burst is written",
			before: []protocol.State{reserved1, unreserved1, reserved2},
			want:   []protocol.State{reserved2},
		},
		{
			name:   "states set during a write follow it, coalesced and in order",
			first:  &reserved1,
			during: []protocol.State{unreserved1, reserved2, bound2},
			want:   []protocol.State{reserved1, bound2},
		},
		{
			name: "transient errors are retried",
			respond: func(_ PodRef, _ protocol.State, call int) error {
				if call < 3 {
					return serverError
				}
				return nil
			},
			before: []protocol.State{reserved1},
			want:   []protocol.State{reserved1, reserved1, reserved1},
		},
		{
			name: "a failed write superseded meanwhile is not retried after the newer one",
			respond: func(_ PodRef, s protocol.State, _ int) error {
				if equalState(s, unreserved1) {
					return serverError
				}
				return nil
			},
			first:  &unreserved1,
			during: []protocol.State{reserved2},
			want:   []protocol.State{unreserved1, reserved2},
		},
		{
			name:    "a deleted pod is dropped",
			respond: func(PodRef, protocol.State, int) error { return notFound },
			before:  []protocol.State{reserved1},
			want:    []protocol.State{reserved1},
		},
		{
			name:    "a pod whose name was reused is dropped",
			respond: func(PodRef, protocol.State, int) error { return conflict },
			before:  []protocol.State{reserved1},
			want:    []protocol.State{reserved1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inFirst := make(chan struct{})
			release := make(chan struct{})
			var once sync.Once
			patcher := newRecordingPatcher(func(pod PodRef, s protocol.State, call int) error {
				if pod.UID == podA.UID && tt.first != nil && call == 1 {
					once.Do(func() { close(inFirst) })
					<-release
				}
				if tt.respond != nil && pod.UID == podA.UID {
					return tt.respond(pod, s, call)
				}
				return nil
			})
			w := NewStateWriter("test", patcher, fastLimiter())
			for _, s := range tt.before {
				w.Set(podA, s)
			}
			w.Set(podB, bound2)
			runWriter(t, w, 2)
			if tt.first != nil {
				w.Set(podA, *tt.first)
				<-inFirst
				for _, s := range tt.during {
					w.Set(podA, s)
				}
				close(release)
			}
			waitDrained(t, w)
			// A retry is rate-limited; let a later write of another pod
			// pass through every worker before reading the record.
			w.Set(podB, reserved1)
			waitDrained(t, w)

			if got := patcher.written(podA.UID); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("writes of pod a = %+v\nwant %+v", got, tt.want)
			}
			if got, want := patcher.written(podB.UID), []protocol.State{bound2, reserved1}; !reflect.DeepEqual(got, want) {
				t.Errorf("writes of pod b = %+v, want %+v", got, want)
			}
			if patcher.overlap {
				t.Error("two writes of one pod ran at the same time")
			}
		})
	}
}

func TestStateWriterStopsWithContext(t *testing.T) {
	w := NewStateWriter("test", newRecordingPatcher(nil), nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { w.Run(ctx, 2); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("writer did not stop when its context ended")
	}
}

// TestStateWriterReportsAFreedNodeBeforeItsNextReservation: a Reserved
// state set after another candidate's Unreserved is written only once that
// Unreserved has landed, so no watch of the namespace sees the node held
// by both (a gang's source would count it twice); a Reserved set before
// it, or with no Unreserved pending, is not held back.
func TestStateWriterReportsAFreedNodeBeforeItsNextReservation(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	p := newRecordingPatcher(func(pod PodRef, state protocol.State, _ int) error {
		if pod.Name == "freed" {
			<-release
		}
		mu.Lock()
		order = append(order, pod.Name+" "+string(state.Phase))
		mu.Unlock()
		return nil
	})
	w := NewStateWriter("test", p, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, 4)

	w.Set(PodRef{Namespace: "ns", Name: "early", UID: "early"}, reserved1)
	waitUntil(t, func() bool { return len(p.written("early")) == 1 })
	w.Set(PodRef{Namespace: "ns", Name: "freed", UID: "freed"}, unreserved1)
	waitUntil(t, func() bool { return len(p.written("freed")) == 1 }) // in flight, held
	w.Set(PodRef{Namespace: "ns", Name: "next", UID: "next"}, reserved2)
	time.Sleep(100 * time.Millisecond) // ten rechecks: it must still wait
	if got := p.written("next"); len(got) != 0 {
		t.Fatalf("a Reserved state was written while an Unreserved set before it was not: %v", got)
	}
	close(release)
	waitUntil(t, func() bool { return len(p.written("next")) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"early Reserved", "freed Unreserved", "next Reserved"}; !slices.Equal(order, want) {
		t.Errorf("written in the order %v, want %v", order, want)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
