package protocol

import (
	"fmt"
	"reflect"
	"testing"
)

// TestParseState: a report decodes as encoding/json decodes it, the
// second time from memory; a report that does not decode is an error each
// time; the memory stays under its bound.
func TestParseState(t *testing.T) {
	raw := `{"phase":"Reserved","nonce":"n1","node":"a","score":3,"topology":{"zone":"z1"}}`
	want := State{Phase: PhaseReserved, Nonce: "n1", Node: "a", Score: 3, Topology: map[string]string{"zone": "z1"}}
	for i := range 2 {
		got, err := ParseState(raw)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("read %d: %+v, %v; want %+v", i, got, err, want)
		}
	}
	if _, ok := parsedStates.get(raw); !ok {
		t.Fatal("a decoded report is not remembered")
	}
	for range 2 {
		if _, err := ParseState(`{"phase":`); err == nil {
			t.Fatal("a report cut short decodes")
		}
	}
	if _, ok := parsedStates.get(`{"phase":`); ok {
		t.Fatal("a report that does not decode is remembered")
	}
	for i := range 3 * maxParsedStates {
		if _, err := ParseState(fmt.Sprintf(`{"phase":"Reserved","nonce":"n%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := parsedStates.len(); n > maxParsedStates {
		t.Fatalf("%d reports remembered, more than %d", n, maxParsedStates)
	}
}
