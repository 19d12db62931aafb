package protocol

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestStateDomain: the source reads of a target's report only the entries
// it can use as a node's labels, and a bounded number of them.
func TestStateDomain(t *testing.T) {
	many := map[string]string{}
	want16 := map[string]string{}
	for i := range MaxTopologyEntries + 4 {
		k := fmt.Sprintf("example.com/k%02d", i)
		many[k] = "v"
		if i < MaxTopologyEntries {
			want16[k] = "v"
		}
	}
	for _, tt := range []struct {
		name     string
		topology map[string]string
		want     map[string]string
	}{
		{"none", nil, nil},
		{"empty", map[string]string{}, nil},
		{"region and zone", map[string]string{"topology.kubernetes.io/region": "eu", "topology.kubernetes.io/zone": "eu-1a"},
			map[string]string{"topology.kubernetes.io/region": "eu", "topology.kubernetes.io/zone": "eu-1a"}},
		{"an empty value is a label value", map[string]string{"node.kubernetes.io/capacity": ""}, map[string]string{"node.kubernetes.io/capacity": ""}},
		{"a key that is no label key", map[string]string{"zone": "a", "no key/at/all": "x", "": "y", "-bad": "z"}, map[string]string{"zone": "a"}},
		{"a value that is no label value", map[string]string{"zone": "a b", "region": strings.Repeat("r", 64), "rack": "-x"}, nil},
		{"a too long name", map[string]string{"example.com/" + strings.Repeat("n", 64): "v"}, nil},
		{"more than the bound: the first by key", many, want16},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := State{Phase: PhaseBound, Nonce: "n", Topology: tt.topology}.Domain()
			if !maps.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("Domain() = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestStateTopologyWire: the topology travels in the state's JSON under
// "topology", and a state without one encodes as it did before.
func TestStateTopologyWire(t *testing.T) {
	b, err := json.Marshal(State{Phase: PhaseReserved, Nonce: "n", Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"phase":"Reserved","nonce":"n","node":"node-1"}`; got != want {
		t.Errorf("state without a topology encodes as %s, want %s", got, want)
	}
	var s State
	if err := json.Unmarshal([]byte(`{"phase":"Bound","nonce":"n","node":"node-1","topology":{"topology.kubernetes.io/zone":"a"}}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.Topology["topology.kubernetes.io/zone"] != "a" {
		t.Errorf("parsed topology %v, want zone a", s.Topology)
	}
}

func TestDomainRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		domain  map[string]string
		encoded string
	}{
		{nil, "{}"},
		{map[string]string{}, "{}"},
		{map[string]string{"topology.kubernetes.io/zone": "b", "topology.kubernetes.io/region": "eu"},
			`{"topology.kubernetes.io/region":"eu","topology.kubernetes.io/zone":"b"}`},
		{map[string]string{"node.kubernetes.io/capacity": ""}, `{"node.kubernetes.io/capacity":""}`},
	} {
		got := EncodeDomain(tt.domain)
		if got != tt.encoded {
			t.Errorf("EncodeDomain(%v) = %s, want %s", tt.domain, got, tt.encoded)
		}
		back, err := ParseDomain(got)
		if err != nil || !maps.Equal(back, tt.domain) {
			t.Errorf("ParseDomain(%s) = %v, %v, want %v", got, back, err, tt.domain)
		}
	}
}

func TestParseDomain(t *testing.T) {
	tooMany := map[string]string{}
	for i := range MaxTopologyEntries + 1 {
		tooMany[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, tt := range []struct {
		value   string
		want    map[string]string
		wantErr bool
	}{
		{value: "", want: nil},
		{value: "{}", want: nil},
		{value: `{"topology.kubernetes.io/zone":"a"}`, want: map[string]string{"topology.kubernetes.io/zone": "a"}},
		{value: `null`, wantErr: true},
		{value: `[]`, wantErr: true},
		{value: `{"zone":1}`, wantErr: true},
		{value: `{"no key/at/all":"a"}`, wantErr: true},
		{value: `{"zone":"a b"}`, wantErr: true},
		{value: `{"zone":"a"`, wantErr: true},
		{value: EncodeDomain(tooMany), wantErr: true},
	} {
		got, err := ParseDomain(tt.value)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseDomain(%q) error = %v, wantErr %v", tt.value, err, tt.wantErr)
			continue
		}
		if !maps.Equal(got, tt.want) {
			t.Errorf("ParseDomain(%q) = %v, want %v", tt.value, got, tt.want)
		}
	}
}

// TestDefaultTopologyKeys: the default keys are Kubernetes' region and
// zone labels and the capacity type's node label.
func TestDefaultTopologyKeys(t *testing.T) {
	want := []string{corev1.LabelTopologyRegion, corev1.LabelTopologyZone, DefaultCapacityNodeLabel}
	if !slices.Equal(DefaultTopologyKeys, want) {
		t.Errorf("DefaultTopologyKeys = %v, want %v", DefaultTopologyKeys, want)
	}
	for _, k := range DefaultTopologyKeys {
		if !ValidTopologyKey(k) {
			t.Errorf("default key %q is no label key", k)
		}
	}
}

func TestValidateTopologyKeys(t *testing.T) {
	tooMany := make([]string, MaxTopologyEntries+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("k%d", i)
	}
	for _, tt := range []struct {
		name    string
		keys    []string
		wantErr bool
	}{
		{"none", nil, false},
		{"defaults", DefaultTopologyKeys, false},
		{"a name without prefix", []string{"rack"}, false},
		{"the bound", tooMany[:MaxTopologyEntries], false},
		{"more than the bound", tooMany, true},
		{"empty", []string{""}, true},
		{"no label key", []string{"a b"}, true},
		{"two slashes", []string{"a/b/c"}, true},
		{"twice", []string{"rack", "rack"}, true},
	} {
		if err := ValidateTopologyKeys(tt.keys); (err != nil) != tt.wantErr {
			t.Errorf("%s: ValidateTopologyKeys(%q) = %v, wantErr %v", tt.name, tt.keys, err, tt.wantErr)
		}
	}
}
