package reservation

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// in reserves a candidate in a target, on a node of domain zone.
func in(target, nonce, zone string, score int64) Observed {
	o := reserved(target, nonce, score)
	if zone != "" {
		o.Domain = placement.Domain{zone}
	}
	return o
}

// zoneSpread is a DoNotSchedule spread over zones a and b with maxSkew 1,
// two siblings already in zone a.
func zoneSpread() *Judgement {
	return &Judgement{
		Constraints: []placement.Constraint{{TopologyKey: "zone", MaxSkew: 1, WhenUnsatisfiable: placement.DoNotSchedule}},
		Weight:      1,
		Known:       []placement.Domain{{"a"}, {"b"}},
		Placed:      []placement.Domain{{"a"}, {"a"}, {"b"}},
	}
}

// TestDecideJudgesEveryElection: each way an election can be made (the
// first, a re-election after the elected reservation ended, the elected
// target's new reservation on another node) elects only a reservation the
// spread allows. It goes through decide, the function the controller
// calls, so that a build which elects around the judgement fails it.
func TestDecideJudgesEveryElection(t *testing.T) {
	elected := protocol.Election{Generation: 3, Target: "t1", Nonce: "n1"}
	tests := []struct {
		name     string
		election protocol.Election
		observed []Observed
		// want is the target elected, "" for an election withdrawn or
		// none made.
		want string
	}{
		{
			name:     "first election: the reservation in the full zone is passed over",
			observed: []Observed{in("t1", "n1", "a", 90), in("t2", "n2", "b", 10)},
			want:     "t2",
		},
		{
			name:     "first election: only the full zone reserved, nothing is elected",
			observed: []Observed{in("t1", "n1", "a", 90)},
		},
		{
			name:     "re-election after the elected reservation ended: not into the full zone",
			election: elected,
			observed: []Observed{unreserved("t1", "n1"), in("t2", "n2", "a", 50)},
		},
		{
			name:     "re-election after the elected reservation ended: into the allowed zone",
			election: elected,
			observed: []Observed{unreserved("t1", "n1"), in("t2", "n2", "a", 90), in("t3", "n3", "b", 10)},
			want:     "t3",
		},
		{
			name:     "the elected target reserved again, on a node of the full zone",
			election: elected,
			observed: []Observed{in("t1", "n9", "a", 90)},
		},
		{
			name:     "the elected target reserved again, on a node of the full zone, another allowed",
			election: elected,
			observed: []Observed{in("t1", "n9", "a", 90), in("t2", "n2", "b", 10)},
			want:     "t2",
		},
		{
			name:     "the elected target reserved again in an allowed zone",
			election: elected,
			observed: []Observed{in("t1", "n9", "b", 10)},
			want:     "t1",
		},
		{
			name:     "a reservation whose domain is not known is not elected under DoNotSchedule",
			observed: []Observed{in("t1", "n1", "", 90)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(Input{SourceUID: uid, Election: tt.election, Observed: tt.observed, Policy: zoneSpread()})
			got := ""
			if d.Elects() {
				got = d.Elect.Target
			}
			if got != tt.want {
				t.Fatalf("elected %q (decision %+v), want %q", got, d.Elect, tt.want)
			}
			if d.Allow != nil && (d.Elect == nil || d.Allow.Target != d.Elect.Target) {
				t.Errorf("allows %s without electing it", d.Allow.Target)
			}
			for _, o := range d.Observed {
				if o.Exists && o.State.Phase == protocol.PhaseReserved && o.Target == got && o.Excluded != "" {
					t.Errorf("elected %s, which the policy excluded: %s", got, o.Excluded)
				}
			}
		})
	}
}

// TestDecideUnknownDomainUnderScheduleAnyway: a reservation whose domain
// is not known is passed over only by a constraint that filters; under
// ScheduleAnyway it may be elected, scored as kube-scheduler scores a node
// without the key (lowest), so a reservation in a known domain wins.
func TestDecideUnknownDomainUnderScheduleAnyway(t *testing.T) {
	anyway := zoneSpread()
	anyway.Constraints[0].WhenUnsatisfiable = placement.ScheduleAnyway
	for _, tt := range []struct {
		name     string
		observed []Observed
		want     string
	}{
		{name: "alone, it is elected", observed: []Observed{in("t1", "n1", "", 90)}, want: "t1"},
		{name: "beside one in the emptier zone, the known one wins", observed: []Observed{in("t1", "n1", "", 90), in("t2", "n2", "b", 50)}, want: "t2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(Input{SourceUID: uid, Observed: tt.observed, Policy: anyway})
			if !d.Elects() || d.Elect.Target != tt.want {
				t.Fatalf("elected %+v, want %s (observed %+v)", d.Elect, tt.want, d.Observed)
			}
		})
	}
}

// TestDecideWithoutPolicyIsTheProtocol: with no policy, a decision is the
// protocol's step alone; the judgement adds nothing and removes nothing.
func TestDecideWithoutPolicyIsTheProtocol(t *testing.T) {
	observed := []Observed{in("t1", "n1", "a", 90), in("t2", "n2", "b", 10)}
	d := Decide(Input{SourceUID: uid, Observed: observed})
	if !d.Elects() || d.Elect.Target != "t1" {
		t.Fatalf("elected %+v, want t1 (the best score)", d.Elect)
	}
	if !slices.EqualFunc(d.Observed, observed, func(a, b Observed) bool { return a.Excluded == b.Excluded && a.Bonus == b.Bonus }) {
		t.Errorf("observations changed without a policy: %+v", d.Observed)
	}
}

// TestDecideLeavesItsInputAlone: the judgement works on a copy, so the
// controller's observations stay as observed between two decisions (the
// second, under the workload's lock, judges them afresh).
func TestDecideLeavesItsInputAlone(t *testing.T) {
	observed := []Observed{in("t1", "n1", "a", 90)}
	Decide(Input{SourceUID: uid, Observed: observed, Policy: zoneSpread()})
	if observed[0].Excluded != "" || observed[0].Bonus != 0 {
		t.Errorf("input judged in place: %+v", observed[0])
	}
}

// TestDecideCountsAgain: the same reservations, judged against a newer
// count (a sibling elected meanwhile), give another decision: the count is
// an input, not something Decide remembers.
func TestDecideCountsAgain(t *testing.T) {
	j := zoneSpread()
	j.Placed = []placement.Domain{{"a"}, {"b"}}
	observed := []Observed{in("t1", "n1", "a", 90)}
	if d := Decide(Input{SourceUID: uid, Observed: observed, Policy: j}); !d.Elects() {
		t.Fatalf("a 1-1 count allows zone a, got %+v", d)
	}
	j.Placed = append(j.Placed, placement.Domain{"a"})
	if d := Decide(Input{SourceUID: uid, Observed: observed, Policy: j}); d.Elects() {
		t.Fatalf("a 2-1 count forbids zone a, got an election of %s", d.Elect.Target)
	}
}

func TestDecideScoringWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	window := func(first time.Time) *Judgement {
		return &Judgement{Window: &Window{Candidates: 2, Timeout: 300 * time.Millisecond, FirstReserved: first}}
	}
	one := []Observed{in("t1", "n1", "", 10)}
	tests := []struct {
		name     string
		policy   *Judgement
		election protocol.Election
		observed []Observed
		wait     time.Duration
	}{
		{name: "one of two reserved, just now: waits the rest of the window", policy: window(now.Add(-100 * time.Millisecond)), observed: one, wait: 200 * time.Millisecond},
		{name: "the window has passed", policy: window(now.Add(-time.Second)), observed: one},
		{name: "two reserved", policy: window(now), observed: []Observed{in("t1", "n1", "", 10), in("t2", "n2", "", 5)}},
		{name: "nothing reserved yet", policy: window(time.Time{}), observed: []Observed{{Target: "t1"}}},
		{name: "elected already", policy: window(now), election: protocol.Election{Generation: 1, Target: "t1", Nonce: "n1"}, observed: one},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(Input{SourceUID: uid, Election: tt.election, Observed: tt.observed, Policy: tt.policy, Now: now})
			if d.Wait != tt.wait {
				t.Fatalf("wait %v, want %v", d.Wait, tt.wait)
			}
			if d.Wait > 0 && (d.Elect != nil || d.Allow != nil) {
				t.Errorf("a waiting decision writes: %+v", d)
			}
		})
	}
}

// recorder is an electionWriter that records the writes and fails those
// it is told to.
type recorder struct {
	writes        []string
	domains       []map[string]string
	failElection  error
	failAllowance error
}

func (r *recorder) writeElection(_ context.Context, _ *corev1.Pod, e protocol.Election, domain map[string]string) error {
	if r.failElection != nil {
		return r.failElection
	}
	r.writes = append(r.writes, "election "+e.Encode())
	r.domains = append(r.domains, domain)
	return nil
}

func (r *recorder) allow(_ context.Context, _ *corev1.Pod, a Allowance) error {
	if r.failAllowance != nil {
		return r.failAllowance
	}
	r.writes = append(r.writes, "allow "+a.Target)
	return nil
}

// TestApplyWritesTheElectionBeforeTheAllowance: an allowance leaves only
// once its election is durable; a conflict (or any failure) writing the
// election sends no allowance at all.
func TestApplyWritesTheElectionBeforeTheAllowance(t *testing.T) {
	reservation := in("t1", "n1", "", 10)
	reservation.State.Topology = map[string]string{"topology.kubernetes.io/zone": "a", "bad key!": "x"}
	d := Decide(Input{SourceUID: uid, Observed: []Observed{reservation, in("t2", "n2", "", 5)}})
	if !d.Elects() || d.Allow == nil {
		t.Fatalf("want an election and its allowance, got %+v", d)
	}
	pod := &corev1.Pod{}

	r := &recorder{}
	var atElected []string
	if err := applyElection(context.Background(), r, pod, d, func() { atElected = slices.Clone(r.writes) }); err != nil {
		t.Fatal(err)
	}
	want := []string{"election " + d.Elect.Encode(), "allow t1"}
	if !slices.Equal(r.writes, want) {
		t.Errorf("writes %v, want %v", r.writes, want)
	}
	if !slices.Equal(atElected, want[:1]) {
		t.Errorf("siblings were let go after %v, want after the election only", atElected)
	}
	// The election carries the elected node's domain, as judged peer
	// input: the malformed key is dropped.
	if got := protocol.EncodeDomain(r.domains[0]); got != `{"topology.kubernetes.io/zone":"a"}` {
		t.Errorf("election written with domain %s", got)
	}

	lost := &recorder{failElection: errors.New("conflict")}
	called := false
	if err := applyElection(context.Background(), lost, pod, d, func() { called = true }); err == nil {
		t.Error("a failed election write was not reported")
	}
	if len(lost.writes) != 0 || called {
		t.Errorf("after a failed election write: writes %v, siblings let go %v", lost.writes, called)
	}

	// An allowance again for the election the pod holds needs no election.
	again := Decision{Allow: d.Allow}
	r = &recorder{}
	if err := applyElection(context.Background(), r, pod, again, nil); err != nil || !slices.Equal(r.writes, []string{"allow t1"}) {
		t.Errorf("writes %v, err %v", r.writes, err)
	}
}
