package reservation

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestADeniedReservationIsNeverElected: a reservation this process denied
// is not elected nor counted as a gang's place once its denial is lifted
// (its target may have let it go: a CI run elected two members of a gang
// on reservations denied a moment before, which their target rejected
// after the rest of the gang bound); the target's next reservation, with a
// new nonce, may be; the memory of it goes after staleWindow.
func TestADeniedReservationIsNeverElected(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	uid := types.UID("u1")
	var m memory
	reserved := func(nonce string) Observed {
		return Observed{Target: "t3", Exists: true, State: protocol.State{Phase: protocol.PhaseReserved, Nonce: nonce}}
	}
	m.noteDenied(uid, "t3", "n1", now)
	if !m.deniedHere(uid, reserved("n1")) {
		t.Fatal("the denied reservation is not remembered")
	}
	if m.deniedHere(uid, reserved("n2")) {
		t.Fatal("the target's next reservation counts as denied")
	}
	if m.deniedHere("u2", reserved("n1")) {
		t.Fatal("another pod's reservation counts as denied")
	}

	o := reserved("n1")
	o.DeniedHere = true
	if got, ok := best(string(uid), []Observed{o}, ""); ok {
		t.Fatalf("elected %+v, a reservation this process denied", got)
	}
	if got, ok := best(string(uid), []Observed{o, reserved("n2")}, ""); !ok || got.State.Nonce != "n2" {
		t.Fatalf("elected %+v, %v; want the new reservation", got, ok)
	}
	if m := gangMember("a0-1", protocol.Election{}, "", []Observed{o}); len(m.Reserved) != 0 {
		t.Fatalf("a denied reservation counts as a place of the gang: %+v", m)
	}

	m.sweep(now.Add(staleWindow + time.Second))
	if m.deniedHere(uid, reserved("n1")) {
		t.Fatal("the denial is remembered past staleWindow")
	}
}
