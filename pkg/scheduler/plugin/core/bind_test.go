package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// candidateServer stands in for the API server's handling of one candidate
// over a fake clientset: reads, merge patches of its annotations and
// Bindings, each write with the preconditions the real one checks (UID,
// resourceVersion, a Binding of a bound pod) and a new resourceVersion.
// beforeWrite, when set, runs once before the next write is judged: what
// another scheduler does between a copy's read and the write made from it.
// The deposed scheduler writes through client, its successor through other:
// a fake clientset runs one call at a time.
type candidateServer struct {
	mu            sync.Mutex
	pod           *v1.Pod
	version       int
	beforeWrite   func()
	client, other *fake.Clientset
}

func newCandidateServer(t *testing.T, annotations map[string]string) *candidateServer {
	t.Helper()
	s := &candidateServer{version: 1}
	s.pod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "c", UID: "uid-c", ResourceVersion: "1",
		Labels:      map[string]string{protocol.CandidateLabel: "true", protocol.SourceUIDLabel: "source-uid"},
		Annotations: annotations,
	}}
	s.client, s.other = s.clientset(), s.clientset()
	return s
}

func (s *candidateServer) clientset() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return true, s.pod.DeepCopy(), nil
	})
	c.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.hook()
		var patch struct {
			Metadata struct {
				UID             string            `json:"uid"`
				ResourceVersion string            `json:"resourceVersion"`
				Annotations     map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &patch); err != nil {
			return true, nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.precondition(patch.Metadata.UID, patch.Metadata.ResourceVersion); err != nil {
			return true, nil, err
		}
		s.write(patch.Metadata.Annotations)
		return true, s.pod.DeepCopy(), nil
	})
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		s.hook()
		b := a.(k8stesting.CreateAction).GetObject().(*v1.Binding)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.precondition(string(b.UID), b.ResourceVersion); err != nil {
			return true, nil, err
		}
		if s.pod.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(v1.Resource("pods/binding"), s.pod.Name, fmt.Errorf("pod %s is already assigned to node %q", s.pod.Name, s.pod.Spec.NodeName))
		}
		s.pod.Spec.NodeName = b.Target.Name
		s.write(b.Annotations)
		return true, &metav1.Status{Status: metav1.StatusSuccess}, nil
	})
	return c
}

func (s *candidateServer) hook() {
	s.mu.Lock()
	f := s.beforeWrite
	s.beforeWrite = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
}

func (s *candidateServer) precondition(uid, resourceVersion string) error {
	if uid != "" && uid != string(s.pod.UID) {
		return apierrors.NewConflict(v1.Resource("pods"), s.pod.Name, errors.New("Precondition failed: UID"))
	}
	if resourceVersion != "" && resourceVersion != s.pod.ResourceVersion {
		return apierrors.NewConflict(v1.Resource("pods"), s.pod.Name, fmt.Errorf("Precondition failed: ResourceVersion %s, is %s", resourceVersion, s.pod.ResourceVersion))
	}
	return nil
}

func (s *candidateServer) write(annotations map[string]string) {
	if s.pod.Annotations == nil {
		s.pod.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		s.pod.Annotations[k] = v
	}
	s.version++
	s.pod.ResourceVersion = strconv.Itoa(s.version)
}

// annotate is a write of someone else (the source) to the candidate.
func (s *candidateServer) annotate(annotations map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(annotations)
}

func (s *candidateServer) current() *v1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pod.DeepCopy()
}

func (s *candidateServer) state(t *testing.T) protocol.State {
	t.Helper()
	st, ok := reportedState(s.current())
	if !ok {
		t.Fatalf("candidate reports no state: %v", s.current().Annotations)
	}
	return st
}

func stateJSON(s protocol.State) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestADeposedSchedulerCannotBind plays a deposed scheduler (old: it holds
// the reservation in Permit, allowed by the source) against its successor
// (fresh: it finds the candidate Reserved by a reservation it does not hold
// and reports it lost), in every order of their writes, including the old
// one frozen between reading the candidate and binding it. Exactly one of
// the two lands: a lost reservation never binds, and a bound candidate is
// never reported lost.
func TestADeposedSchedulerCannotBind(t *testing.T) {
	ctx := context.Background()
	// setUp makes the old scheduler's reservation, Reserved and allowed
	// on the candidate.
	setUp := func(t *testing.T) (*candidateServer, *Manager, *Manager, string) {
		old := NewManager(Options{PluginName: "p", SchedulerName: "flotilla"}, nil, nil, NewStateWriter("old", newRecordingPatcher(nil), nil))
		fresh := NewManager(Options{PluginName: "p", SchedulerName: "flotilla"}, nil, nil, NewStateWriter("fresh", newRecordingPatcher(nil), nil))
		s := newCandidateServer(t, nil)
		nonce, err := old.Reserve(ctx, s.current(), "node-1", nil, 50)
		if err != nil {
			t.Fatal(err)
		}
		s.annotate(map[string]string{protocol.StateAnnotation: stateJSON(protocol.State{Phase: protocol.PhaseReserved, Nonce: nonce, Node: "node-1"})})
		s.annotate(map[string]string{protocol.AllowedAnnotation: protocol.Allowance{SourceUID: "source-uid", Generation: 1, Nonce: nonce}.Encode()})
		return s, old, fresh, nonce
	}
	// reportLost is what the successor writes on rescheduling the
	// candidate it found (its copy: found).
	reportLost := func(t *testing.T, s *candidateServer, fresh *Manager, found *v1.Pod) error {
		t.Helper()
		fresh.Rescheduling(ctx, found)
		fresh.writer.mu.Lock()
		want, ok := fresh.writer.pending[found.UID]
		fresh.writer.mu.Unlock()
		if !ok || want.state.Reason != ReasonReservationLost {
			t.Fatalf("the successor queued %+v, want a lost reservation", want.state)
		}
		return ClientStatePatcher{Client: s.other}.PatchState(ctx, refOf(found), want.state)
	}
	bind := func(s *candidateServer, old *Manager) error {
		return old.Bind(ctx, s.current(), "node-1", ClientBinder{Client: s.client})
	}
	// bindAsOther is the deposed scheduler's bind while the successor's
	// call is in flight.
	bindAsOther := func(s *candidateServer, old *Manager) error {
		return old.Bind(ctx, s.current(), "node-1", ClientBinder{Client: s.other})
	}
	refused := func(t *testing.T, err error) {
		t.Helper()
		if !errors.As(err, new(*BindRefusedError)) {
			t.Fatalf("the deposed scheduler's bind returned %v, want it refused", err)
		}
	}
	stale := func(t *testing.T, err error) {
		t.Helper()
		if !errors.As(err, new(*StaleStateError)) {
			t.Fatalf("the lost report returned %v, want it dropped as stale", err)
		}
	}

	t.Run("the report lands first: the deposed scheduler does not bind", func(t *testing.T) {
		s, old, fresh, nonce := setUp(t)
		if err := reportLost(t, s, fresh, s.current()); err != nil {
			t.Fatal(err)
		}
		refused(t, bind(s, old))
		if n := s.current().Spec.NodeName; n != "" {
			t.Fatalf("candidate bound to %s after its reservation was reported lost", n)
		}
		if st := s.state(t); st.Phase != protocol.PhaseUnreserved || st.Nonce != nonce {
			t.Errorf("candidate reports %+v, want reservation %s Unreserved", st, nonce)
		}
	})

	t.Run("frozen between reading and binding: the report lands in between, the bind does not", func(t *testing.T) {
		s, old, fresh, _ := setUp(t)
		s.beforeWrite = func() {
			if err := reportLost(t, s, fresh, s.current()); err != nil {
				t.Error(err)
			}
		}
		refused(t, bind(s, old))
		if n := s.current().Spec.NodeName; n != "" {
			t.Fatalf("candidate bound to %s after its reservation was reported lost", n)
		}
	})

	t.Run("the bind lands first: the report does not", func(t *testing.T) {
		s, old, fresh, nonce := setUp(t)
		found := s.current()
		if err := bind(s, old); err != nil {
			t.Fatal(err)
		}
		stale(t, reportLost(t, s, fresh, found))
		if st := s.state(t); st.Phase != protocol.PhaseBound || st.Nonce != nonce {
			t.Errorf("bound candidate reports %+v, want reservation %s Bound", st, nonce)
		}
	})

	t.Run("the report judged before the bind, sent after it: the report does not land", func(t *testing.T) {
		s, old, fresh, nonce := setUp(t)
		found := s.current()
		s.beforeWrite = func() {
			if err := bindAsOther(s, old); err != nil {
				t.Error(err)
			}
		}
		fresh.Rescheduling(ctx, found)
		fresh.writer.mu.Lock()
		want := fresh.writer.pending[found.UID].state
		fresh.writer.mu.Unlock()
		stale(t, ClientStatePatcher{Client: s.client}.PatchState(ctx, refOf(found), want))
		if st := s.state(t); st.Phase != protocol.PhaseBound || st.Nonce != nonce || s.current().Spec.NodeName != "node-1" {
			t.Errorf("candidate reports %+v on node %q, want reservation %s Bound on node-1", st, s.current().Spec.NodeName, nonce)
		}
	})

	t.Run("the successor's new reservation replaces the lost one: the deposed scheduler does not bind", func(t *testing.T) {
		s, old, fresh, _ := setUp(t)
		s.beforeWrite = func() {
			nonce, err := fresh.Reserve(ctx, s.current(), "node-2", nil, 50)
			if err != nil {
				t.Error(err)
			}
			if err := (ClientStatePatcher{Client: s.other}).PatchState(ctx, refOf(s.current()), protocol.State{Phase: protocol.PhaseReserved, Nonce: nonce, Node: "node-2"}); err != nil {
				t.Error(err)
			}
		}
		refused(t, bind(s, old))
		if st := s.state(t); st.Phase != protocol.PhaseReserved || st.Node != "node-2" {
			t.Errorf("candidate reports %+v, want the successor's reservation on node-2", st)
		}
	})

	t.Run("the source writes between reading and binding: the bind judges again and binds", func(t *testing.T) {
		s, old, _, nonce := setUp(t)
		s.beforeWrite = func() { s.annotate(map[string]string{"example.com/unrelated": "x"}) }
		if err := bind(s, old); err != nil {
			t.Fatalf("bind after an unrelated write: %v", err)
		}
		if st := s.state(t); st.Phase != protocol.PhaseBound || st.Nonce != nonce || s.current().Spec.NodeName != "node-1" {
			t.Errorf("candidate reports %+v on node %q, want reservation %s Bound on node-1", st, s.current().Spec.NodeName, nonce)
		}
	})

	t.Run("a reservation report never lands on a bound candidate", func(t *testing.T) {
		s, old, fresh, _ := setUp(t)
		found := s.current()
		if err := bind(s, old); err != nil {
			t.Fatal(err)
		}
		nonce, err := fresh.Reserve(ctx, found, "node-2", nil, 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []protocol.State{
			{Phase: protocol.PhaseReserved, Nonce: nonce, Node: "node-2"},
			{Phase: protocol.PhaseUnreserved, Nonce: nonce, Node: "node-2", Reason: "binding failed or the reservation was abandoned"},
		} {
			stale(t, ClientStatePatcher{Client: s.client}.PatchState(ctx, refOf(found), st))
		}
		if st := s.state(t); st.Phase != protocol.PhaseBound {
			t.Errorf("bound candidate reports %+v", st)
		}
	})
}

// TestStateLands is StateLands' table: what each state may be written over.
func TestStateLands(t *testing.T) {
	reservedN := stateJSON(protocol.State{Phase: protocol.PhaseReserved, Nonce: "n", Node: "node-1"})
	reservedM := stateJSON(protocol.State{Phase: protocol.PhaseReserved, Nonce: "m", Node: "node-2"})
	unreservedN := stateJSON(protocol.State{Phase: protocol.PhaseUnreserved, Nonce: "n"})
	lost := protocol.State{Phase: protocol.PhaseUnreserved, Nonce: "n", Reason: ReasonReservationLost}
	ended := protocol.State{Phase: protocol.PhaseUnreserved, Nonce: "n", Reason: "permit timed out"}
	for _, tt := range []struct {
		name    string
		state   protocol.State
		current string // the candidate's state annotation, "" for none
		bound   bool
		lands   bool
	}{
		{"Reserved on a fresh candidate", protocol.State{Phase: protocol.PhaseReserved, Nonce: "m"}, "", false, true},
		{"Reserved over a lost reservation", protocol.State{Phase: protocol.PhaseReserved, Nonce: "m"}, reservedN, false, true},
		{"Reserved on a bound candidate", protocol.State{Phase: protocol.PhaseReserved, Nonce: "m"}, reservedN, true, false},
		{"lost over that reservation", lost, reservedN, false, true},
		{"lost over another reservation", lost, reservedM, false, false},
		{"lost over its end", lost, unreservedN, false, false},
		{"lost on a bound candidate", lost, reservedN, true, false},
		{"an end over its reservation", ended, reservedN, false, true},
		{"an end with no state yet", ended, "", false, true},
		{"an end over another reservation", ended, reservedM, false, true},
		{"an end on a bound candidate", ended, reservedN, true, false},
		{"Bound on a bound candidate", protocol.State{Phase: protocol.PhaseBound, Nonce: "n"}, reservedN, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := &v1.Pod{}
			if tt.current != "" {
				pod.Annotations = map[string]string{protocol.StateAnnotation: tt.current}
			}
			if tt.bound {
				pod.Spec.NodeName = "node-1"
			}
			if why := StateLands(tt.state, pod); (why == "") != tt.lands {
				t.Errorf("StateLands = %q, want landing %v", why, tt.lands)
			}
		})
	}
}

// TestAPreAllowedCandidateBindsWithoutAReport: a candidate its source
// created pre-allowed (protocol.AnyReservation) is reserved with no
// Reserved report, allowed at Permit and bound on its first reservation;
// two schedulers that both hold it bind it once; and a scheduler does not
// bind it while it reports another reservation Reserved.
func TestAPreAllowedCandidateBindsWithoutAReport(t *testing.T) {
	ctx := context.Background()
	preAllowance := map[string]string{protocol.AllowedAnnotation: protocol.Allowance{SourceUID: "source-uid", Generation: 3, Nonce: protocol.AnyReservation}.Encode()}
	newManager := func(name string) *Manager {
		return NewManager(Options{PluginName: "p", SchedulerName: "flotilla"}, nil, nil, NewStateWriter(name, newRecordingPatcher(nil), nil))
	}
	reserve := func(t *testing.T, m *Manager, pod *v1.Pod, node string) string {
		t.Helper()
		nonce, err := m.Reserve(ctx, pod, node, nil, 50)
		if err != nil {
			t.Fatal(err)
		}
		return nonce
	}

	t.Run("reserved without a report, allowed at once, bound", func(t *testing.T) {
		s := newCandidateServer(t, preAllowance)
		m := newManager("one")
		nonce := reserve(t, m, s.current(), "node-1")
		m.writer.mu.Lock()
		queued, ok := m.writer.pending[s.pod.UID]
		m.writer.mu.Unlock()
		if ok {
			t.Errorf("Reserve queued %+v for a pre-allowed candidate, want no report", queued.state)
		}
		if d := m.Permit(ctx, s.current()); d.Verdict != Allow {
			t.Fatalf("Permit = %v (%q), want Allow", d.Verdict, d.Reason)
		}
		if err := m.Bind(ctx, s.current(), "node-1", ClientBinder{Client: s.client}); err != nil {
			t.Fatalf("bind: %v", err)
		}
		if st := s.state(t); st.Phase != protocol.PhaseBound || st.Nonce != nonce || s.current().Spec.NodeName != "node-1" {
			t.Errorf("candidate reports %+v on node %q, want reservation %s Bound on node-1", st, s.current().Spec.NodeName, nonce)
		}
	})

	t.Run("two schedulers hold it: one binds", func(t *testing.T) {
		s := newCandidateServer(t, preAllowance)
		old, fresh := newManager("old"), newManager("fresh")
		reserve(t, old, s.current(), "node-1")
		freshNonce := reserve(t, fresh, s.current(), "node-2")
		// The old one is frozen between judging its copy and binding; the
		// successor binds meanwhile.
		s.beforeWrite = func() {
			if err := fresh.Bind(ctx, s.current(), "node-2", ClientBinder{Client: s.other}); err != nil {
				t.Error(err)
			}
		}
		if err := old.Bind(ctx, s.current(), "node-1", ClientBinder{Client: s.client}); !errors.As(err, new(*BindRefusedError)) {
			t.Fatalf("the second bind returned %v, want it refused", err)
		}
		if st := s.state(t); st.Phase != protocol.PhaseBound || st.Nonce != freshNonce || s.current().Spec.NodeName != "node-2" {
			t.Errorf("candidate reports %+v on node %q, want reservation %s Bound on node-2", st, s.current().Spec.NodeName, freshNonce)
		}
	})

	t.Run("another reservation reported Reserved: not bound", func(t *testing.T) {
		s := newCandidateServer(t, preAllowance)
		m := newManager("one")
		reserve(t, m, s.current(), "node-1")
		s.annotate(map[string]string{protocol.StateAnnotation: stateJSON(protocol.State{Phase: protocol.PhaseReserved, Nonce: "m", Node: "node-2"})})
		if err := m.Bind(ctx, s.current(), "node-1", ClientBinder{Client: s.client}); !errors.As(err, new(*BindRefusedError)) {
			t.Fatalf("bind returned %v, want it refused", err)
		}
		if n := s.current().Spec.NodeName; n != "" {
			t.Errorf("candidate bound to %s under another scheduler's reservation", n)
		}
	})

	t.Run("a pre-allowance of another source pod allows nothing", func(t *testing.T) {
		s := newCandidateServer(t, map[string]string{protocol.AllowedAnnotation: protocol.Allowance{SourceUID: "someone-else", Generation: 3, Nonce: protocol.AnyReservation}.Encode()})
		m := newManager("one")
		reserve(t, m, s.current(), "node-1")
		m.writer.mu.Lock()
		_, ok := m.writer.pending[s.pod.UID]
		m.writer.mu.Unlock()
		if !ok {
			t.Error("Reserve queued no Reserved report for a candidate the source has not allowed")
		}
		if d := m.Permit(ctx, s.current()); d.Verdict != Wait {
			t.Errorf("Permit = %v, want Wait", d.Verdict)
		}
		if err := m.Bind(ctx, s.current(), "node-1", ClientBinder{Client: s.client}); !errors.As(err, new(*BindRefusedError)) {
			t.Fatalf("bind returned %v, want it refused", err)
		}
	})
}
