package scenario

import (
	"testing"
)

// TestGenerateIsDeterministic: a seed is a reproduction.
func TestGenerateIsDeterministic(t *testing.T) {
	for seed := uint64(1); seed < 50; seed++ {
		a, b := Generate(seed, 4), Generate(seed, 4)
		if a.String() != b.String() {
			t.Fatalf("seed %d drew two scenarios:\n%s\n%s", seed, a, b)
		}
	}
}

// TestGenerateDrawsTheFleetItPromises: every fleet has a self target, at
// most two remote clusters, and never deletes its last target.
func TestGenerateDrawsTheFleetItPromises(t *testing.T) {
	for seed := uint64(1); seed < 500; seed++ {
		s := Generate(seed, 6)
		self := false
		for _, tg := range s.Fleet.Targets {
			self = self || tg.Self()
		}
		if !self || len(s.Fleet.Remotes) > 2 {
			t.Fatalf("seed %d: %s", seed, s)
		}
		live := len(s.Fleet.Targets)
		for _, ph := range s.Phases {
			for _, a := range ph.Actions {
				if a.Kind == FaultDeleteTarget {
					live--
				}
			}
		}
		if live < 1 {
			t.Fatalf("seed %d deletes every target: %s", seed, s)
		}
	}
}
