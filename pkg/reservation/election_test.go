package reservation

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

const uid = "src-uid"

func reserved(target, nonce string, score int64) Observed {
	return Observed{Target: target, Exists: true, State: protocol.State{Phase: protocol.PhaseReserved, Nonce: nonce, Score: score}}
}

func unreserved(target, nonce string) Observed {
	return Observed{Target: target, Exists: true, State: protocol.State{Phase: protocol.PhaseUnreserved, Nonce: nonce, Reason: "permit timed out"}}
}

func bound(target, nonce string, generation int64) Observed {
	return Observed{Target: target, Exists: true, State: protocol.State{Phase: protocol.PhaseBound, Nonce: nonce},
		Allowed: protocol.Allowance{SourceUID: uid, Generation: generation, Nonce: nonce}.Encode()}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name      string
		current   protocol.Election
		observed  []Observed
		wantElect *protocol.Election
		wantAllow string // target
		wantNonce string
		wantBound string
	}{
		{
			name:     "nothing reserved: wait",
			observed: []Observed{{Target: "c1", Exists: true}, {Target: "c2"}},
		},
		{
			name:      "two reserved at once: exactly one elected, the better score",
			observed:  []Observed{reserved("c1", "n1", 40), reserved("c2", "n2", 90)},
			wantElect: &protocol.Election{Generation: 1, Target: "c2", Nonce: "n2"},
			wantAllow: "c2", wantNonce: "n2",
		},
		{
			name:      "equal scores: deterministic by name",
			observed:  []Observed{reserved("c3", "n3", 50), reserved("c1", "n1", 50)},
			wantElect: &protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			wantAllow: "c1", wantNonce: "n1",
		},
		{
			name:     "elected and reserved, already allowed: nothing to do",
			current:  protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed: []Observed{func() Observed { o := reserved("c1", "n1", 1); o.Allowed = "src-uid/1/n1"; return o }(), reserved("c2", "n2", 99)},
		},
		{
			name:      "elected, allowance not yet written (agent restarted): allow again, same election",
			current:   protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed:  []Observed{reserved("c1", "n1", 1), reserved("c2", "n2", 99)},
			wantAllow: "c1", wantNonce: "n1",
		},
		{
			name:      "elected candidate unreserved: the next one is elected",
			current:   protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed:  []Observed{unreserved("c1", "n1"), reserved("c2", "n2", 10)},
			wantElect: &protocol.Election{Generation: 2, Target: "c2", Nonce: "n2"},
			wantAllow: "c2", wantNonce: "n2",
		},
		{
			name:      "elected candidate unreserved, no other: election withdrawn",
			current:   protocol.Election{Generation: 4, Target: "c1", Nonce: "n1"},
			observed:  []Observed{unreserved("c1", "n1"), {Target: "c2", Exists: true}},
			wantElect: &protocol.Election{Generation: 5},
		},
		{
			name:     "unreserved report of an older reservation does not withdraw",
			current:  protocol.Election{Generation: 2, Target: "c1", Nonce: "n1b"},
			observed: []Observed{unreserved("c1", "n1a"), reserved("c2", "n2", 10)},
		},
		{
			name:      "elected target reserved again with a new nonce: re-elected for it",
			current:   protocol.Election{Generation: 2, Target: "c1", Nonce: "old"},
			observed:  []Observed{reserved("c1", "new", 5), reserved("c2", "n2", 99)},
			wantElect: &protocol.Election{Generation: 3, Target: "c1", Nonce: "new"},
			wantAllow: "c1", wantNonce: "new",
		},
		{
			name:     "elected target unreachable: keep the election",
			current:  protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed: []Observed{{Target: "c1", Err: errors.New("connection refused")}, reserved("c2", "n2", 99)},
		},
		{
			name:      "elected candidate bound",
			current:   protocol.Election{Generation: 1, Target: "c2", Nonce: "n2"},
			observed:  []Observed{reserved("c1", "n1", 1), bound("c2", "n2", 1)},
			wantBound: "c2",
		},
		{
			name:      "a candidate bound on an allowance of no election on record: never adopted; another elected",
			current:   protocol.Election{},
			observed:  []Observed{reserved("c1", "n1", 99), bound("c2", "n2", 1)},
			wantElect: &protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			wantAllow: "c1", wantNonce: "n1",
		},
		{
			name:     "elected candidate missing from the cache: keep the election until a live read confirms",
			current:  protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed: []Observed{{Target: "c1"}, reserved("c2", "n2", 1)},
		},
		{
			name:      "elected candidate gone, read live: another target elected",
			current:   protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed:  []Observed{{Target: "c1", Live: true}, reserved("c2", "n2", 1)},
			wantElect: &protocol.Election{Generation: 2, Target: "c2", Nonce: "n2"},
			wantAllow: "c2", wantNonce: "n2",
		},
		{
			name:      "elected candidate gone, read live, nothing else reserved: withdrawn",
			current:   protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed:  []Observed{{Target: "c1", Live: true}, {Target: "c2", Exists: true}},
			wantElect: &protocol.Election{Generation: 2},
		},
		{
			name:     "live read failed: keep the election",
			current:  protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed: []Observed{{Target: "c1", Live: true, Err: errors.New("timeout")}, reserved("c2", "n2", 1)},
		},
		{
			name:      "a new candidate in the elected one's place, read live: another target elected",
			current:   protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed:  []Observed{{Target: "c1", Exists: true, Live: true}, reserved("c2", "n2", 1)},
			wantElect: &protocol.Election{Generation: 2, Target: "c2", Nonce: "n2"},
			wantAllow: "c2", wantNonce: "n2",
		},
		{
			name:    "the elected candidate with its report wiped but its allowance on it: keep the election",
			current: protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed: []Observed{{Target: "c1", Exists: true, Live: true,
				Allowed: protocol.Allowance{SourceUID: uid, Generation: 1, Nonce: "n1"}.Encode()}, reserved("c2", "n2", 1)},
		},
		{
			name:     "elected candidate bound and being deleted: keep the election",
			current:  protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"},
			observed: []Observed{{Target: "c1", Live: true, State: protocol.State{Phase: protocol.PhaseBound, Nonce: "n1"}}, reserved("c2", "n2", 1)},
		},
		{
			name:      "withdrawn election: next reservation elected with a higher generation",
			current:   protocol.Election{Generation: 5},
			observed:  []Observed{reserved("c3", "n3", 1)},
			wantElect: &protocol.Election{Generation: 6, Target: "c3", Nonce: "n3"},
			wantAllow: "c3", wantNonce: "n3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := step(uid, tt.current, tt.observed)
			if (d.Elect == nil) != (tt.wantElect == nil) || (d.Elect != nil && *d.Elect != *tt.wantElect) {
				t.Errorf("Elect = %+v, want %+v", d.Elect, tt.wantElect)
			}
			gotAllow := ""
			if d.Allow != nil {
				gotAllow = d.Allow.Target
				if d.Allow.Nonce != tt.wantNonce || d.Allow.SourceUID != uid {
					t.Errorf("Allow = %+v, want nonce %s for %s", d.Allow, tt.wantNonce, uid)
				}
				gen := tt.current.Generation
				if d.Elect != nil {
					gen = d.Elect.Generation
				}
				if d.Allow.Generation != gen {
					t.Errorf("allowance names generation %d, election is at %d", d.Allow.Generation, gen)
				}
			}
			if gotAllow != tt.wantAllow {
				t.Errorf("Allow target = %q, want %q", gotAllow, tt.wantAllow)
			}
			if d.Bound != tt.wantBound {
				t.Errorf("Bound = %q, want %q", d.Bound, tt.wantBound)
			}
		})
	}
}

// TestDecideNeverAllowsTwo replays every order in which two targets can
// report and checks that applying the decisions never leaves two targets
// allowed within one generation and never allows a target that is not elected.
func TestDecideNeverAllowsTwo(t *testing.T) {
	var election protocol.Election
	allowedBy := map[string]string{} // target -> allowance
	apply := func(obs []Observed) {
		for i := range obs {
			obs[i].Allowed = allowedBy[obs[i].Target]
		}
		d := step(uid, election, obs)
		if d.Elect != nil {
			election = *d.Elect
		}
		if d.Allow != nil {
			if d.Allow.Target != election.Target || d.Allow.Generation != election.Generation {
				t.Fatalf("allowance %+v for a target that does not hold election %+v", d.Allow, election)
			}
			allowedBy[d.Allow.Target] = d.Allow.Encode()
		}
	}
	apply([]Observed{reserved("c1", "a", 1), {Target: "c2", Exists: true}})
	apply([]Observed{reserved("c1", "a", 1), reserved("c2", "b", 100)})
	if election.Target != "c1" {
		t.Fatalf("first reserved candidate should keep the election, got %+v", election)
	}
	// c1's permit times out; c2 takes over.
	apply([]Observed{unreserved("c1", "a"), reserved("c2", "b", 100)})
	if election.Target != "c2" || election.Generation != 2 {
		t.Fatalf("want c2 elected at generation 2, got %+v", election)
	}
	// c1 reserves again: its stale allowance names generation 1 and nonce a.
	apply([]Observed{reserved("c1", "a2", 100), reserved("c2", "b", 100)})
	if election.Target != "c2" {
		t.Fatalf("election moved away from a reserved, allowed candidate: %+v", election)
	}
	stale, _ := protocol.ParseAllowance(allowedBy["c1"])
	if stale.Nonce == "a2" {
		t.Fatal("c1's new reservation was allowed while c2 holds the election")
	}
}

func TestDecideReportsBindingsWithoutAllowance(t *testing.T) {
	rogue := Observed{Target: "c3", Exists: true, State: protocol.State{Phase: protocol.PhaseBound, Nonce: "x"}}
	stale := bound("c1", "old", 1)
	stale.State.Nonce = "new" // allowance for an earlier reservation
	d := step(uid, protocol.Election{Generation: 1, Target: "c2", Nonce: "n2"}, []Observed{rogue, stale, reserved("c2", "n2", 1)})
	if len(d.Violations) != 2 {
		t.Errorf("want both bindings without a matching allowance reported, got %v", d.Violations)
	}
	if d.Bound != "" {
		t.Errorf("a binding without allowance must not be adopted, got Bound=%s", d.Bound)
	}
}

// TestDecideNeverAdoptsASecondBindingSilently checks that when two
// candidates of one pod are bound, each on an allowance of its own, the
// current election's is adopted whatever the order of the reports, and the
// other is reported (and so deleted), not kept unseen.
func TestDecideNeverAdoptsASecondBindingSilently(t *testing.T) {
	current := protocol.Election{Generation: 3, Target: "c2", Nonce: "n3"}
	ours, older := bound("c2", "n3", 3), bound("c1", "n1", 1)
	for _, observed := range [][]Observed{{older, ours}, {ours, older}} {
		d := step(uid, current, observed)
		if d.Bound != "c2" {
			t.Errorf("%v: adopted %q, want the current election's c2", targetsOf(observed), d.Bound)
		}
		if len(d.Violations) != 1 || d.Violations[0] != "c1" {
			t.Errorf("%v: violations %v, want c1 reported", targetsOf(observed), d.Violations)
		}
	}
	later := bound("c4", "n2", 2)
	for _, observed := range [][]Observed{{older, later}, {later, older}} {
		d := step(uid, protocol.Election{Generation: 1, Target: "c1", Nonce: "n1"}, observed)
		if d.Bound != "c1" || len(d.Violations) != 1 || d.Violations[0] != "c4" {
			t.Errorf("%v with c1's election current: adopted %q, violations %v; want c1 adopted, c4 reported", targetsOf(observed), d.Bound, d.Violations)
		}
		// Neither is the current election's: an election is withdrawn only
		// once its reservation cannot bind, so both are reported.
		d = step(uid, protocol.Election{Generation: 9}, observed)
		if d.Bound != "" || len(d.Violations) != 2 {
			t.Errorf("%v with a withdrawn election: adopted %q, violations %v; want none adopted, both reported", targetsOf(observed), d.Bound, d.Violations)
		}
	}
}

// TestDecideNeverAdoptsAForgedBinding: a target that binds its candidate on
// its own and writes both its report (Bound, nonce X) and an allowance
// naming X is never adopted, whatever generation it forges: only the
// current election's own target, generation and nonce are.
func TestDecideNeverAdoptsAForgedBinding(t *testing.T) {
	elected := protocol.Election{Generation: 3, Target: "a", Nonce: "n1"}
	for _, tt := range []struct {
		name    string
		current protocol.Election
		forged  Observed
	}{
		{"no election", protocol.Election{}, bound("b", "x", 0)},
		{"a later generation than the record", elected, bound("b", "x", 7)},
		{"the current generation, another target", elected, bound("b", "x", 3)},
		{"the current generation and target, another nonce", elected, bound("a", "x", 3)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := step(uid, tt.current, []Observed{tt.forged, reserved("c", "n3", 1)})
			if d.Bound != "" || len(d.Violations) != 1 || d.Violations[0] != tt.forged.Target {
				t.Errorf("adopted %q, violations %v; want %s reported and nothing adopted", d.Bound, d.Violations, tt.forged.Target)
			}
		})
	}
	if !newerAllowance(uid, elected, []Observed{bound("b", "x", 7)}) {
		t.Error("a bound candidate allowed by a later generation than the record is not sent for a fresh read of the record")
	}
}

func targetsOf(observed []Observed) []string {
	var out []string
	for _, o := range observed {
		out = append(out, o.Target)
	}
	return out
}

func TestReasons(t *testing.T) {
	obs := []Observed{
		{Target: "c2", Exists: true, Unschedulable: "0/1 nodes are available: 1 Insufficient cpu."},
		{Target: "c1", Err: errors.New("connection refused")},
	}
	want := "c1: connection refused; c2: 0/1 nodes are available: 1 Insufficient cpu."
	if got := Reasons(obs); got != want {
		t.Errorf("Reasons = %q, want %q", got, want)
	}
	if got := Reasons(append(obs, Observed{Target: "c3", Exists: true})); got != "" {
		t.Errorf("a target that has not answered yet must hold back the event, got %q", got)
	}
	if got := Reasons(append(obs, reserved("c3", "n", 1))); got != "" {
		t.Errorf("a reserved target means the pod can run, got %q", got)
	}
}

// The placement policy's verdicts: an excluded reservation is never
// elected, however good its score, and the bonus (spread and preferences)
// can change the winner.
func TestDecideFollowsThePolicy(t *testing.T) {
	excluded := reserved("c1", "n1", 100)
	excluded.Excluded = "zone=a would have 2 pods against 0 in b (maxSkew 1)"
	if d := step(uid, protocol.Election{}, []Observed{excluded}); d.Elect != nil {
		t.Errorf("elected %+v, an excluded reservation", d.Elect)
	}
	if d := step(uid, protocol.Election{}, []Observed{excluded, reserved("c2", "n2", 0)}); d.Elect == nil || d.Elect.Target != "c2" {
		t.Errorf("elected %+v, want c2", d.Elect)
	}
	spread := reserved("c2", "n2", 0)
	spread.Bonus = 200
	if d := step(uid, protocol.Election{}, []Observed{reserved("c1", "n1", 50), spread}); d.Elect == nil || d.Elect.Target != "c2" {
		t.Errorf("elected %+v, want c2 (0 + 200 over 50)", d.Elect)
	}
	if r := Reasons([]Observed{excluded}); r == "" || !strings.Contains(r, "maxSkew") {
		t.Errorf("reasons %q, want the exclusion", r)
	}
}

// TestUnschedulableMessage: the condition of a pod no target can run reads
// as kube-scheduler's of a pod no node can run, and names each target's
// reason, the uninvited ones included.
func TestUnschedulableMessage(t *testing.T) {
	for _, tc := range []struct {
		reasons   string
		uninvited []string
		targets   int
		want      string
	}{
		{"t1: 0/4 nodes are available: 4 Insufficient cpu.", nil, 1, "0/1 targets can run the pod: t1: 0/4 nodes are available: 4 Insufficient cpu."},
		{"t1: full; t2: unreachable", []string{"target t3 does not invite this cluster into namespace shop"}, 3,
			"0/3 targets can run the pod: t1: full; t2: unreachable; target t3 does not invite this cluster into namespace shop"},
		{"", []string{"target t1 does not invite this cluster into namespace shop"}, 1, "0/1 targets can run the pod: target t1 does not invite this cluster into namespace shop"},
	} {
		if got := unschedulableMessage(tc.reasons, tc.uninvited, tc.targets); got != tc.want {
			t.Errorf("unschedulableMessage(%q, %q, %d) = %q, want %q", tc.reasons, tc.uninvited, tc.targets, got, tc.want)
		}
	}
}

// TestDecideOnAPreElection: an election made before any reservation (nonce
// protocol.AnyReservation, its candidate created pre-allowed) wins when its
// candidate binds on the pre-allowance, whatever nonce the binding
// reports; it stands while the candidate may still bind (no report yet,
// a reservation ended, another target reserved); it is freed only when
// its candidate is gone; and a target that reports a reservation of it (a
// scheduler that does not know pre-allowances) gets that reservation
// elected and allowed, as any elected target that reserved anew.
func TestDecideOnAPreElection(t *testing.T) {
	pre := protocol.Election{Generation: 4, Target: "c1", Nonce: protocol.AnyReservation}
	preAllowed := func(o Observed, generation int64) Observed {
		o.Allowed = protocol.Allowance{SourceUID: uid, Generation: generation, Nonce: protocol.AnyReservation}.Encode()
		return o
	}
	bound := func(generation int64) Observed {
		return preAllowed(Observed{Target: "c1", Exists: true, State: protocol.State{Phase: protocol.PhaseBound, Nonce: "n7", Node: "node-1"}}, generation)
	}
	tests := []struct {
		name       string
		observed   []Observed
		wantBound  string
		violations []string
		wantElect  *protocol.Election
	}{
		{name: "bound on the pre-allowance: won", observed: []Observed{bound(4), {Target: "c2"}}, wantBound: "c1"},
		{name: "bound on an earlier election's pre-allowance: a violation", observed: []Observed{bound(3)}, violations: []string{"c1"}},
		{name: "no report yet: the election stands", observed: []Observed{preAllowed(Observed{Target: "c1", Exists: true}, 4)}},
		{name: "a reservation ended: the election stands (the next one binds)", observed: []Observed{preAllowed(unreserved("c1", "n7"), 4), reserved("c2", "n2", 99)}},
		{name: "another target reserved: the election stands", observed: []Observed{preAllowed(Observed{Target: "c1", Exists: true}, 4), reserved("c2", "n2", 99)}},
		{name: "its candidate is gone (read live): withdrawn", observed: []Observed{{Target: "c1", Live: true}},
			wantElect: &protocol.Election{Generation: 5}},
		{name: "its candidate is gone (read live), another reserved: that one elected", observed: []Observed{{Target: "c1", Live: true}, reserved("c2", "n2", 9)},
			wantElect: &protocol.Election{Generation: 5, Target: "c2", Nonce: "n2"}},
		{name: "its candidate pre-allowed, read live: not gone", observed: []Observed{preAllowed(Observed{Target: "c1", Exists: true, Live: true}, 4)}},
		{name: "its target reports a reservation: that reservation elected", observed: []Observed{preAllowed(reserved("c1", "n8", 50), 4)},
			wantElect: &protocol.Election{Generation: 5, Target: "c1", Nonce: "n8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := step(uid, pre, tt.observed)
			if d.Bound != tt.wantBound {
				t.Errorf("Bound = %q, want %q", d.Bound, tt.wantBound)
			}
			if !slices.Equal(d.Violations, tt.violations) {
				t.Errorf("Violations = %v, want %v", d.Violations, tt.violations)
			}
			switch {
			case (d.Elect == nil) != (tt.wantElect == nil):
				t.Fatalf("Elect = %+v, want %+v", d.Elect, tt.wantElect)
			case d.Elect != nil && *d.Elect != *tt.wantElect:
				t.Errorf("Elect = %+v, want %+v", *d.Elect, *tt.wantElect)
			case d.Elect != nil && d.Elect.Elected() && (d.Allow == nil || d.Allow.Nonce != d.Elect.Nonce || d.Allow.Generation != d.Elect.Generation):
				t.Errorf("elected %+v with allowance %+v", *d.Elect, d.Allow)
			case d.Elect == nil && d.Allow != nil:
				t.Errorf("allowance %+v without a new election", *d.Allow)
			}
		})
	}
	// A cache of the source pod that lags behind the pre-election sees
	// its candidate bound on a later election than the one it holds.
	if !newerAllowance(uid, protocol.Election{Generation: 3}, []Observed{bound(4)}) {
		t.Error("a candidate bound on a later pre-allowance is not seen as newer than the cached election")
	}
}
