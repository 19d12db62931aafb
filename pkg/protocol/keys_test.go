package protocol

import "testing"

// TestWrittenByFlotilla: the keys a pod's author writes are the opt-in,
// the policy's name and the split's inputs; every other key of Prefix,
// the election and its domain among them, is Flotilla's alone.
func TestWrittenByFlotilla(t *testing.T) {
	for _, tt := range []struct {
		key  string
		want bool
	}{
		{ElectionAnnotation, true},
		{ElectedDomainAnnotation, true},
		{SourceSpecAnnotation, true},
		{StateAnnotation, true},
		{DomainAnnotation, true},
		{LocalLabel, true},
		{ElectLabel, false},
		{PlacementPolicyAnnotation, false},
		{"app", false},
		{"example.com/" + "domain", false},
	} {
		if got := WrittenByFlotilla(tt.key); got != tt.want {
			t.Errorf("WrittenByFlotilla(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}
