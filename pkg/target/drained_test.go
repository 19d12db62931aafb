package target

import "testing"

// TestDrained: a target is marked drained only once it is out of the set,
// and a target added again under that name is not drained.
func TestDrained(t *testing.T) {
	t1 := &Target{Name: "t1", NodeName: "flotilla-t1"}
	s := NewSet(t1)
	s.MarkDrained("t1")
	if s.Drained("t1") {
		t.Fatal("a target still in the set is drained")
	}
	s.Drain(t1)
	if _, ok := s.Get("t1"); ok {
		t.Fatal("a target being drained is still in the set")
	}
	if got, ok := s.ByVirtualNode("flotilla-t1"); !ok || got != t1 {
		t.Fatal("a target being drained is not found by its virtual node, where its pods still run")
	}
	s.MarkDrained("t1")
	if !s.Drained("t1") {
		t.Fatal("a removed target marked drained is not")
	}
	s.Add(&Target{Name: "t1", NodeName: "flotilla-t1"})
	if s.Drained("t1") {
		t.Fatal("a target added again under the name is still drained")
	}
	s.Remove(t1)
	if got, ok := s.ByVirtualNode("flotilla-t1"); !ok || got == t1 {
		t.Fatal("the drained target, removed, is still found, or the new one is not")
	}
}
