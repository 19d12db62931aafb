package target

import "testing"

// TestDrained: a target is marked drained only once it is out of the set,
// and a target added again under that name is not drained.
func TestDrained(t *testing.T) {
	t1 := &Target{Name: "t1"}
	s := NewSet(t1)
	s.MarkDrained("t1")
	if s.Drained("t1") {
		t.Fatal("a target still in the set is drained")
	}
	s.Remove(t1)
	s.MarkDrained("t1")
	if !s.Drained("t1") {
		t.Fatal("a removed target marked drained is not")
	}
	s.Add(&Target{Name: "t1"})
	if s.Drained("t1") {
		t.Fatal("a target added again under the name is still drained")
	}
}
