package protocol

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// checkDomain fails unless d is a domain the source may use: at most
// MaxTopologyEntries label keys with label values, which encodes and
// parses back as itself.
func checkDomain(t *testing.T, what string, d map[string]string) {
	t.Helper()
	if d != nil && len(d) == 0 {
		t.Fatalf("%s: an empty domain that is not nil", what)
	}
	if len(d) > MaxTopologyEntries {
		t.Fatalf("%s: %d entries, more than %d", what, len(d), MaxTopologyEntries)
	}
	for k, v := range d {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Fatalf("%s: key %q is no label key: %v", what, k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Fatalf("%s: value %q of %q is no label value: %v", what, v, k, errs)
		}
	}
	back, err := ParseDomain(EncodeDomain(d))
	if err != nil || !maps.Equal(back, d) {
		t.Fatalf("%s: %v encodes as %q and parses back as %v, %v", what, d, EncodeDomain(d), back, err)
	}
}

// FuzzStateDomain: whatever a target writes as its state, the domain the
// source takes from it is one it may use and write on its source pod.
func FuzzStateDomain(f *testing.F) {
	for _, seed := range []string{
		`{"phase":"Bound","nonce":"n","topology":{"topology.kubernetes.io/zone":"a"}}`,
		`{"phase":"Reserved","nonce":"n","topology":{"zone":"a b","":"x","k":"` + strings.Repeat("v", 64) + `"}}`,
		`{"phase":"Reserved","nonce":"n","topology":{"a/b/c":"x","-k":"","k":"-"}}`,
		`{"phase":"Reserved","nonce":"n","topology":{"\u00e9":"x","k":"\ud800"}}`,
		`{"phase":"Reserved","nonce":"n","topology":null}`,
		`{"phase":"Reserved","nonce":"n","topology":{"a":"1","b":"1","c":"1","d":"1","e":"1","f":"1","g":"1","h":"1","i":"1","j":"1","k":"1","l":"1","m":"1","n":"1","o":"1","p":"1","q":"1"}}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var s State
		if json.Unmarshal([]byte(raw), &s) != nil {
			return
		}
		checkDomain(t, "Domain of "+raw, s.Domain())
	})
}

// FuzzParseDomain: the source pod's domain, whatever it holds, parses as
// an error or as a domain the source may use.
func FuzzParseDomain(f *testing.F) {
	for _, seed := range []string{
		"", "{}", "null", "[]", `{"topology.kubernetes.io/zone":"a"}`, `{"zone":1}`,
		`{"a":"1","a":"2"}`, `{"no key/at/all":"a"}`, `{"k":"\ud800"}`, ` { "k" : "v" } `,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := ParseDomain(v)
		if err != nil {
			return
		}
		checkDomain(t, "ParseDomain("+v+")", d)
	})
}

// sameState compares states field by field; an empty topology is none
// (it is not encoded).
func sameState(a, b State) bool {
	return a.Phase == b.Phase && a.Nonce == b.Nonce && a.Node == b.Node && a.Score == b.Score &&
		a.Reason == b.Reason && maps.Equal(a.Topology, b.Topology)
}
