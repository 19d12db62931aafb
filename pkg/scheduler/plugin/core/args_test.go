package core

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func TestArgsPermitTimeout(t *testing.T) {
	tests := []struct {
		name    string
		args    Args
		want    time.Duration
		wantErr bool
	}{
		{name: "default", args: Args{}, want: 60 * time.Second},
		{name: "set", args: Args{PermitTimeoutSeconds: ptr.To[int64](30)}, want: 30 * time.Second},
		{name: "framework maximum", args: Args{PermitTimeoutSeconds: ptr.To[int64](900)}, want: 15 * time.Minute},
		{name: "zero", args: Args{PermitTimeoutSeconds: ptr.To[int64](0)}, wantErr: true},
		{name: "negative", args: Args{PermitTimeoutSeconds: ptr.To[int64](-5)}, wantErr: true},
		{name: "above maximum", args: Args{PermitTimeoutSeconds: ptr.To[int64](901)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.args.PermitTimeout()
			if (err != nil) != tt.wantErr {
				t.Fatalf("PermitTimeout() error = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("PermitTimeout() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestArgsTopology(t *testing.T) {
	tooMany := make([]string, protocol.MaxTopologyEntries+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("example.com/k%d", i)
	}
	tests := []struct {
		name    string
		keys    []string
		want    []string
		wantErr string
	}{
		{name: "default", keys: nil, want: protocol.DefaultTopologyKeys},
		{name: "none", keys: []string{}, want: []string{}},
		{name: "set", keys: []string{"topology.kubernetes.io/zone", "rack"}, want: []string{"topology.kubernetes.io/zone", "rack"}},
		{name: "no label key", keys: []string{"a b"}, wantErr: `topologyKeys: topology key "a b" is not a label key`},
		{name: "empty key", keys: []string{""}, wantErr: `topology key "" is not a label key`},
		{name: "twice", keys: []string{"rack", "rack"}, wantErr: `topology key "rack" is listed twice`},
		{name: "too many", keys: tooMany, wantErr: "at most 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Args{TopologyKeys: tt.keys}.Topology()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Topology() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("Topology() = %v, %v, want %v", got, err, tt.want)
			}
		})
	}
	decoded, err := DecodeArgs(&runtime.Unknown{Raw: []byte("topologyKeys: [rack]\n"), ContentType: runtime.ContentTypeYAML})
	if err != nil || !slices.Equal(decoded.TopologyKeys, []string{"rack"}) {
		t.Errorf("decoding topologyKeys: %v, %v", decoded.TopologyKeys, err)
	}
}

// TestDecodeArgs: a profile's args are decoded strictly, so that a typo
// fails the scheduler's start with the field's name instead of running with
// the default timeout.
func TestDecodeArgs(t *testing.T) {
	tests := []struct {
		name    string
		obj     runtime.Object
		want    *int64
		wantErr string
	}{
		{name: "no args", obj: nil},
		{name: "empty", obj: &runtime.Unknown{}},
		{name: "JSON", obj: &runtime.Unknown{Raw: []byte(`{"permitTimeoutSeconds":30}`), ContentType: runtime.ContentTypeJSON}, want: ptr.To[int64](30)},
		{name: "YAML", obj: &runtime.Unknown{Raw: []byte("permitTimeoutSeconds: 45\n"), ContentType: runtime.ContentTypeYAML}, want: ptr.To[int64](45)},
		{name: "misspelt field", obj: &runtime.Unknown{Raw: []byte(`{"permitTimeoutSecond":30}`)}, wantErr: `unknown field "permitTimeoutSecond"`},
		{name: "duplicated field", obj: &runtime.Unknown{Raw: []byte(`{"permitTimeoutSeconds":30,"permitTimeoutSeconds":40}`)}, wantErr: `duplicate field "permitTimeoutSeconds"`},
		{name: "wrong type", obj: &runtime.Unknown{Raw: []byte(`{"permitTimeoutSeconds":"30s"}`)}, wantErr: "permitTimeoutSeconds"},
		{name: "not Unknown", obj: &Unsupported{}, wantErr: "runtime.Unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeArgs(tt.obj)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeArgs() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !ptr.Equal(got.PermitTimeoutSeconds, tt.want) {
				t.Errorf("permitTimeoutSeconds = %v, want %v", ptr.Deref(got.PermitTimeoutSeconds, -1), ptr.Deref(tt.want, -1))
			}
		})
	}
}

// Unsupported is an args object of a type the framework never hands over.
type Unsupported struct{ runtime.Unknown }
