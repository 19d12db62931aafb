package core

import (
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func TestDecide(t *testing.T) {
	const (
		nonce     = "a1b2c3d4e5f60718"
		sourceUID = "6b0f1d2e-0000-4000-8000-000000000001"
	)
	labels := map[string]string{protocol.CandidateLabel: "true", protocol.SourceUIDLabel: sourceUID}
	allow := func(uid, nonce string) string {
		return protocol.Allowance{SourceUID: uid, Generation: 1, Nonce: nonce}.Encode()
	}
	deny := func(uid string) string { return protocol.Denial{SourceUID: uid, Generation: 2}.Encode() }
	tests := []struct {
		name        string
		nonce       string
		labels      map[string]string
		annotations map[string]string
		want        Verdict
	}{
		{name: "no answer yet", nonce: nonce, labels: labels, want: Wait},
		{name: "allowed for this reservation", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: allow(sourceUID, nonce)}, want: Allow},
		{name: "allowance for an earlier reservation is stale", nonce: "ffff000011112222", labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: allow(sourceUID, nonce)}, want: Wait},
		{name: "allowance for another source pod", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: allow("someone-else", nonce)}, want: Wait},
		{name: "candidate without source uid label never allows", nonce: nonce, labels: map[string]string{protocol.CandidateLabel: "true"},
			annotations: map[string]string{protocol.AllowedAnnotation: allow(sourceUID, nonce)}, want: Wait},
		{name: "denied", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.DeniedAnnotation: deny(sourceUID)}, want: Reject},
		{name: "denial wins over a matching allowance", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: allow(sourceUID, nonce), protocol.DeniedAnnotation: deny(sourceUID)}, want: Reject},
		{name: "denial of another source pod", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.DeniedAnnotation: deny("someone-else")}, want: Wait},
		{name: "malformed denial: a nonce", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.DeniedAnnotation: nonce}, want: Wait},
		{name: "malformed denial: bad generation", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.DeniedAnnotation: sourceUID + "/-1"}, want: Wait},
		{name: "malformed allowance: garbage", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: "true"}, want: Wait},
		{name: "malformed allowance: bad generation", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: sourceUID + "/x/" + nonce}, want: Wait},
		{name: "malformed allowance: empty", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: ""}, want: Wait},
		{name: "malformed allowance: nonce with extra segments", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: sourceUID + "/1/" + nonce + "/x"}, want: Wait},
		{name: "no reservation nonce never allows", nonce: "", labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: sourceUID + "/1/", protocol.DeniedAnnotation: ""}, want: Wait},
		{name: "nil maps", nonce: nonce, want: Wait},
		{name: "pre-allowed: any reservation of the candidate", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: allow(sourceUID, protocol.AnyReservation)}, want: Allow},
		{name: "pre-allowed for another source pod", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: allow("someone-else", protocol.AnyReservation)}, want: Wait},
		{name: "pre-allowed but denied", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: allow(sourceUID, protocol.AnyReservation), protocol.DeniedAnnotation: deny(sourceUID)}, want: Reject},
		{name: "pre-allowed: no reservation nonce never allows", nonce: "", labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: allow(sourceUID, protocol.AnyReservation)}, want: Wait},
		{name: "a wildcard among other characters is no pre-allowance", nonce: nonce, labels: labels,
			annotations: map[string]string{protocol.AllowedAnnotation: allow(sourceUID, nonce+protocol.AnyReservation)}, want: Wait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.nonce, tt.labels, tt.annotations)
			if got.Verdict != tt.want {
				t.Fatalf("Decide = %v (%q), want %v", got.Verdict, got.Reason, tt.want)
			}
			if got.Verdict == Reject && !strings.Contains(got.Reason, "denied") {
				t.Errorf("reject reason %q does not name the denial", got.Reason)
			}
		})
	}
}

func TestIsCandidate(t *testing.T) {
	tests := []struct {
		labels map[string]string
		want   bool
	}{
		{labels: map[string]string{protocol.CandidateLabel: "true"}, want: true},
		{labels: map[string]string{protocol.CandidateLabel: "false"}},
		{labels: map[string]string{protocol.CandidateLabel: ""}},
		{labels: map[string]string{"app": "web"}},
		{labels: nil},
	}
	for _, tt := range tests {
		if got := IsCandidate(tt.labels); got != tt.want {
			t.Errorf("IsCandidate(%v) = %v, want %v", tt.labels, got, tt.want)
		}
	}
}
