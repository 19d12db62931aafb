package core

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestNewNonce(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		n, err := NewNonce()
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(n) {
			t.Fatalf("nonce %q is not 16 hex characters", n)
		}
		if seen[n] {
			t.Fatalf("nonce %q repeated", n)
		}
		seen[n] = true
	}
}

func TestUnreserveReason(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		r    Reservation
		want string
	}{
		{name: "recorded reason wins", r: Reservation{Reason: "denied by source: reservation x was refused", WaitingSince: now.Add(-time.Hour)}, want: "denied"},
		{name: "waited the whole timeout", r: Reservation{WaitingSince: now.Add(-30 * time.Second)}, want: "permit timed out"},
		{name: "ended early while waiting", r: Reservation{WaitingSince: now.Add(-time.Second)}, want: "binding failed"},
		{name: "never waited", r: Reservation{}, want: "scheduling cycle failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UnreserveReason(tt.r, 30*time.Second, now); !strings.Contains(got, tt.want) {
				t.Errorf("UnreserveReason = %q, want it to mention %q", got, tt.want)
			}
		})
	}
}

func TestUnreserveKind(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		r    Reservation
		want string
	}{
		{Reservation{Reason: "denied by source", WaitingSince: now.Add(-time.Hour)}, UnreservedRejected},
		{Reservation{WaitingSince: now.Add(-30 * time.Second)}, UnreservedPermitTimeout},
		{Reservation{WaitingSince: now.Add(-time.Second)}, UnreservedBindFailed},
		{Reservation{}, UnreservedCycleFailed},
	} {
		if got := UnreserveKind(tt.r, 30*time.Second, now); got != tt.want {
			t.Errorf("UnreserveKind(%+v) = %q, want %q", tt.r, got, tt.want)
		}
	}
}
