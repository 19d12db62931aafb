package core

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"
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
