package reservation

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// fuzzTargets are the targets of FuzzDecide: one name is a prefix of
// another, as a ClusterTarget "a" and a Target "b" in namespace "a" are.
var fuzzTargets = []string{"a", "a/b", "c"}

// fuzzCandidate is the candidate a target holds, as observe sees it:
// everything on it but the flags is a target's (or, for the allowance, the
// source's) write. flags: 1 exists, 2 being deleted, 4 bound to a node,
// 8 unschedulable, 16 the target is unreachable.
func fuzzPlacement(name string, flags byte, state, allowed, message string) candidate.Placement {
	p := candidate.Placement{Target: &target.Target{Name: name}}
	if flags&16 != 0 {
		p.Err = errors.New("target unreachable")
	}
	if flags&1 == 0 {
		return p
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		protocol.StateAnnotation: state, protocol.AllowedAnnotation: allowed,
	}}}
	if flags&2 != 0 {
		pod.DeletionTimestamp = &metav1.Time{}
	}
	if flags&4 != 0 {
		pod.Spec.NodeName = "node-1"
	}
	if flags&8 != 0 {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: message}}
	}
	p.Candidate = pod
	return p
}

// FuzzDecide feeds the election arbitrary reports of three targets and an
// arbitrary election record. Whatever the targets wrote, a decision names
// only what was observed, an election it writes reads back as written (so
// the next reconcile sees the election this one made), and applying the
// decision and deciding again asks for nothing new.
func FuzzDecide(f *testing.F) {
	reservedA := `{"phase":"Reserved","nonce":"a1b2c3d4e5f60718","node":"n1","score":10}`
	allowA := protocol.Allowance{SourceUID: uid, Generation: 1, Nonce: "a1b2c3d4e5f60718"}.Encode()
	f.Add("", byte(1), reservedA, "", byte(1), `{"phase":"Reserved","nonce":"ffff000011112222"}`, "", byte(0), "", "", "")
	f.Add("1/a/a1b2c3d4e5f60718", byte(1), reservedA, allowA, byte(1), `{"phase":"Reserved","nonce":"ffff000011112222","score":99}`, "", byte(16), "", "", "")
	f.Add("1/a/a1b2c3d4e5f60718", byte(5), `{"phase":"Bound","nonce":"a1b2c3d4e5f60718"}`, allowA, byte(5), `{"phase":"Bound","nonce":"n"}`, "", byte(9), "", "", "no nodes")
	f.Add("1/a/a1b2c3d4e5f60718", byte(1), `{"phase":"Unreserved","nonce":"a1b2c3d4e5f60718","reason":"timeout"}`, allowA, byte(1), `{"phase":"Reserved","nonce":"b/x"}`, "", byte(1), `{"phase":"Reserved","nonce":"b/x"}`, "", "")
	f.Add("", byte(1), `{"phase":"Reserved","nonce":"b/n"}`, "", byte(1), `{"phase":"Reserved","nonce":"n"}`, "", byte(0), "", "", "")
	f.Add("7/a/b/n", byte(3), `{"phase":"Reserved","nonce":"`+strings.Repeat("z", 100)+`"}`, "", byte(1), `not json`, "src-uid/1/n", byte(1), `{"phase":"Reserved"}`, "", "")
	f.Add("x/y", byte(1), `{"phase":"Reserved","nonce":"n","score":-9223372036854775808}`, "", byte(1), `{"phase":"Reserved","nonce":"m","score":9223372036854775807}`, "", byte(1), `{"phase":"Reserved","nonce":"o","score":9223372036854775807}`, "", "")
	f.Fuzz(func(t *testing.T, record string, f0 byte, s0, a0 string, f1 byte, s1, a1 string, f2 byte, s2, a2 string, message string) {
		current, err := protocol.ParseElection(record)
		if err != nil {
			return // the controller logs it and writes nothing
		}
		flags, states, allowed := []byte{f0, f1, f2}, []string{s0, s1, s2}, []string{a0, a1, a2}
		observed := make([]Observed, len(fuzzTargets))
		for i, name := range fuzzTargets {
			observed[i] = observe(fuzzPlacement(name, flags[i], states[i], allowed[i], message))
		}
		d := step(uid, current, observed)
		check(t, current, observed, d)

		// Apply: record the election as the controller does (through its
		// encoding), write the allowance, decide again.
		next := current
		if d.Elect != nil {
			if next, err = protocol.ParseElection(d.Elect.Encode()); err != nil || next != *d.Elect {
				t.Fatalf("election %+v is recorded as %q, which reads back as %+v, %v", *d.Elect, d.Elect.Encode(), next, err)
			}
		}
		if d.Allow != nil {
			for i := range observed {
				if observed[i].Target == d.Allow.Target {
					observed[i].Allowed = d.Allow.Encode()
				}
			}
		}
		again := step(uid, next, observed)
		check(t, next, observed, again)
		if again.Bound == "" && (again.Elect != nil || again.Allow != nil) {
			t.Fatalf("deciding again after %+v (election %+v, allowance %+v) asks for election %+v, allowance %+v",
				observed, d.Elect, d.Allow, again.Elect, again.Allow)
		}
		_ = Reasons(observed)
	})
}

func check(t *testing.T, current protocol.Election, observed []Observed, d Decision) {
	t.Helper()
	if d.Elect != nil && d.Bound != "" {
		t.Fatalf("decision both elects %+v and binds %s", *d.Elect, d.Bound)
	}
	if d.Bound != "" {
		o, ok := find(observed, d.Bound)
		if !ok || !o.Exists || o.State.Phase != protocol.PhaseBound || d.Bound != current.Target || !allowedBy(uid, o, current) {
			t.Fatalf("decision binds %s, which is not bound on the current election's (%+v) allowance: %+v", d.Bound, current, o)
		}
		return
	}
	if e := d.Elect; e != nil {
		if e.Generation != current.Generation+1 {
			t.Fatalf("election %+v does not follow %+v", *e, current)
		}
		if e.Elected() {
			o, ok := find(observed, e.Target)
			if !ok || !o.Exists || o.State.Phase != protocol.PhaseReserved || o.State.Nonce != e.Nonce {
				t.Fatalf("election %+v names no reservation observed: %+v", *e, observed)
			}
			if !protocol.ValidNonce(e.Nonce) {
				t.Fatalf("election %+v names a nonce the protocol refuses", *e)
			}
		}
	}
	if a := d.Allow; a != nil {
		want := current
		if d.Elect != nil {
			want = *d.Elect
		}
		if a.Target != want.Target || a.Nonce != want.Nonce || a.Generation != want.Generation || a.SourceUID != uid {
			t.Fatalf("allowance %+v is not the election's %+v", *a, want)
		}
		if back, err := protocol.ParseAllowance(a.Encode()); err != nil || back != a.Allowance {
			t.Fatalf("allowance %+v is written as %q, which reads back as %+v, %v", *a, a.Encode(), back, err)
		}
	}
}
