package reservation

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func TestDenials(t *testing.T) {
	ours := protocol.Denial{SourceUID: uid, Generation: 3}.Encode()
	theirs := protocol.Denial{SourceUID: "another-pod", Generation: 3}.Encode()
	denied := func(o Observed, d string) Observed { o.Denied = d; return o }
	excluded := func(o Observed) Observed { o.Excluded = "spread"; return o }
	elected := protocol.Election{Generation: 3, Target: "c1", Nonce: "n1"}
	for _, tt := range []struct {
		name       string
		current    protocol.Election
		observed   []Observed
		deny, lift []string
	}{
		{
			name:     "elected: every other candidate is denied, bound, gone and unreachable ones aside",
			current:  elected,
			observed: []Observed{reserved("c1", "n1", 1), reserved("c2", "n2", 1), unreserved("c3", "n3"), {Target: "c4"}, {Target: "c5", Exists: true, Err: errors.New("timeout")}, bound("c6", "n6", 2)},
			deny:     []string{"c2", "c3"},
		},
		{
			name:     "elected: a denial in place is not written again; a denial of another pod does not count",
			current:  elected,
			observed: []Observed{reserved("c1", "n1", 1), denied(reserved("c2", "n2", 1), ours), denied(reserved("c3", "n3", 1), theirs)},
			deny:     []string{"c3"},
		},
		{
			name:     "the elected candidate itself is never denied, and its denial is lifted",
			current:  elected,
			observed: []Observed{denied(reserved("c1", "n1", 1), ours)},
			lift:     []string{"c1"},
		},
		{
			name:     "withdrawn: every denial is lifted, and a candidate the policy excludes is not denied",
			current:  protocol.Election{Generation: 4},
			observed: []Observed{denied(unreserved("c1", "n1"), ours), denied(excluded(unreserved("c2", "n2")), ours), excluded(reserved("c3", "n3", 1))},
			lift:     []string{"c1", "c2"},
		},
		{
			name:     "nothing elected, no policy: nothing denied",
			observed: []Observed{reserved("c1", "n1", 1), reserved("c2", "n2", 1)},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			deny, lift := Denials(uid, tt.current, tt.observed)
			if !slices.Equal(deny, tt.deny) || !slices.Equal(lift, tt.lift) {
				t.Errorf("Denials = deny %v, lift %v; want deny %v, lift %v", deny, lift, tt.deny, tt.lift)
			}
		})
	}
}

// TestDecideNeverElectsADeniedReservation: a Reserved report of a
// candidate the source has denied is about to be rejected by its
// scheduler; electing it would only lose a round.
func TestDecideNeverElectsADeniedReservation(t *testing.T) {
	c2 := reserved("c2", "n2", 99)
	c2.Denied = protocol.Denial{SourceUID: uid, Generation: 1}.Encode()
	d := step(uid, protocol.Election{Generation: 2}, []Observed{c2, reserved("c3", "n3", 1)})
	if d.Elect == nil || d.Elect.Target != "c3" {
		t.Fatalf("Elect = %+v, want c3", d.Elect)
	}
}

// TestSteadyClock: the time a pod entered a state holds while the state
// does, and starts again when it changes or is forgotten.
func TestSteadyClock(t *testing.T) {
	var m memory
	since := func(uid types.UID, key string, now time.Time) time.Time { return m.since(uid, denyClock, key, now) }
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first := since("a", "1/c1/n1", t0)
	if again := since("a", "1/c1/n1", t0.Add(time.Minute)); !again.Equal(first) {
		t.Errorf("the same state restarted the clock: %v, then %v", first, again)
	}
	if other := since("b", "1/c1/n1", t0.Add(2*time.Minute)); !other.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("another pod's clock started at %v, want when it was first seen", other)
	}
	if moved := since("a", "2/c2/n2", t0.Add(3*time.Minute)); !moved.Equal(t0.Add(3 * time.Minute)) {
		t.Errorf("a new state kept the old time: %v", moved)
	}
	m.sweep(first.Add(2 * time.Hour))
	count := len(m.pods)
	if count != 0 {
		t.Errorf("%d entries left after a sweep past their age", count)
	}
}

// TestSteadyMessage: the condition of a pod the spread holds back does not
// change with every sibling placed.
func TestSteadyMessage(t *testing.T) {
	a := steadyMessage("0/2 targets can run the pod: t1: reserved, but the placement policy excludes it: spread: topology.kubernetes.io/zone=a would have 3 pods against 1 in b (maxSkew 1); t2: 0/3 nodes are available")
	b := steadyMessage("0/2 targets can run the pod: t1: reserved, but the placement policy excludes it: spread: topology.kubernetes.io/zone=a would have 4 pods against 2 in b (maxSkew 1); t2: 0/3 nodes are available")
	if a != b {
		t.Errorf("messages differ with the counts:\n%s\n%s", a, b)
	}
	if want := "zone=a would exceed maxSkew 1 against b"; !strings.Contains(a, want) {
		t.Errorf("message %q does not say %q", a, want)
	}
}
