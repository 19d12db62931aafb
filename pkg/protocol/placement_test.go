package protocol

import (
	"slices"
	"testing"
)

// TestParsePinnedDomain reads a candidate's pin as the source wrote it
// (a JSON array of the spread keys' values), and refuses anything else.
func TestParsePinnedDomain(t *testing.T) {
	for _, tt := range []struct {
		value   string
		want    []string
		wantErr bool
	}{
		{value: "", want: nil},
		{value: `["eu","eu-1a"]`, want: []string{"eu", "eu-1a"}},
		{value: `["eu",""]`, want: []string{"eu", ""}},
		{value: `[]`, want: []string{}},
		{value: `{"zone":"a"}`, wantErr: true},
		{value: `["eu",1]`, wantErr: true},
		{value: `["eu"`, wantErr: true},
	} {
		got, err := ParsePinnedDomain(tt.value)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParsePinnedDomain(%q): error %v, want one: %v", tt.value, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && (!slices.Equal(got, tt.want) || (got == nil) != (tt.want == nil)) {
			t.Errorf("ParsePinnedDomain(%q) = %#v, want %#v", tt.value, got, tt.want)
		}
	}
}
