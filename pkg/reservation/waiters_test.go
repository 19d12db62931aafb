package reservation

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestSpreadWaiters(t *testing.T) {
	var s spreadWaiters
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}

	if got := s.changed("w"); len(got) != 0 {
		t.Fatalf("no waiter: %v", got)
	}
	// a narrowed with no change meanwhile: it waits.
	seen := s.begin("w")
	if s.wait("w", a, seen) {
		t.Error("no change since begin, wait says there was one")
	}
	// b counts; a sibling changes before b registers: b must look again,
	// and a is woken.
	seen = s.begin("w")
	if got := s.changed("w"); len(got) != 1 || got[0] != a {
		t.Errorf("woken %v, want [a]", got)
	}
	if !s.wait("w", b, seen) {
		t.Error("a change between begin and wait was missed")
	}
	// b woken once, then forgotten: a second change wakes nobody.
	if got := s.changed("w"); len(got) != 1 || got[0] != b {
		t.Errorf("woken %v, want [b]", got)
	}
	if got := s.changed("w"); len(got) != 0 {
		t.Errorf("woken again %v", got)
	}
	// A count that did not narrow ends with done: nothing is kept.
	seen = s.begin("w")
	s.done("w", a, true)
	if len(s.byKey) != 0 {
		t.Errorf("entries left: %v", s.byKey)
	}
	_ = seen
	// A placed pod is forgotten.
	s.wait("w", a, s.begin("w"))
	s.done("w", a, false)
	if len(s.byKey) != 0 {
		t.Errorf("entries left after done: %v", s.byKey)
	}
}
