package protocol

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestElectionRoundTrip(t *testing.T) {
	for _, e := range []Election{{}, {Generation: 3, Target: "c2", Nonce: "abc"}, {Generation: 4}, {Generation: 5, Target: "shop/eu", Nonce: "n"}} {
		got, err := ParseElection(e.Encode())
		if err != nil || got != e {
			t.Errorf("round trip of %+v gave %+v, %v", e, got, err)
		}
	}
	for _, bad := range []string{"x/y/z", "1/c2", "-1/a/b"} {
		if _, err := ParseElection(bad); err == nil {
			t.Errorf("ParseElection(%q) accepted a malformed record", bad)
		}
	}
}

func TestAllowanceRoundTrip(t *testing.T) {
	a := Allowance{SourceUID: "uid-1", Generation: 7, Nonce: "n1"}
	got, err := ParseAllowance(a.Encode())
	if err != nil || got != a {
		t.Fatalf("round trip of %+v gave %+v, %v", a, got, err)
	}
	for _, bad := range []string{"", "uid//n", "uid/x/n", "/1/n", "uid/1/"} {
		if _, err := ParseAllowance(bad); err == nil {
			t.Errorf("ParseAllowance(%q) accepted a malformed allowance", bad)
		}
	}
}

func TestCandidateName(t *testing.T) {
	a := CandidateName("c1", "t1", "ns", "web-1", "uid-1")
	if a != CandidateName("c1", "t1", "ns", "web-1", "uid-1") {
		t.Error("candidate name is not deterministic")
	}
	for _, other := range []string{
		CandidateName("c2", "t1", "ns", "web-1", "uid-1"),
		CandidateName("c1", "t1", "ns2", "web-1", "uid-1"),
		CandidateName("c1", "t1", "ns", "web-1", "uid-2"),
		// Another target of the same source: a namespaced self Target
		// beside the self ClusterTarget reaches the same namespace.
		CandidateName("c1", "ns/t1", "ns", "web-1", "uid-1"),
		CandidateName("c1", "t2", "ns", "web-1", "uid-1"),
	} {
		if other == a {
			t.Errorf("different source pods or targets share candidate name %s", a)
		}
	}
	long := CandidateName("c1", "t1", "ns", strings.Repeat("a", 250), "u")
	if len(long) > 63 {
		t.Errorf("candidate name %q longer than 63", long)
	}
}

func TestTargetLabelValue(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"self", "team-a/self"},
		{"t1", "t2"},
		{"team-a/t", "team-b/t"},
	} {
		if TargetLabelValue(tc.a) == TargetLabelValue(tc.b) {
			t.Errorf("targets %q and %q share the label value %s", tc.a, tc.b, TargetLabelValue(tc.a))
		}
	}
	for _, name := range []string{"self", "team-a/self", strings.Repeat("n", 63) + "/" + strings.Repeat("t", 253)} {
		v := TargetLabelValue(name)
		if v != TargetLabelValue(name) {
			t.Errorf("TargetLabelValue(%q) is not deterministic", name)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 || len(v) != 16 {
			t.Errorf("TargetLabelValue(%q) = %q, not a 16-character label value: %v", name, v, errs)
		}
	}
	if TargetLabel == CandidateLabel || TargetLabel == SourceClusterLabel || !strings.HasPrefix(TargetLabel, Prefix) {
		t.Errorf("TargetLabel %q must be a key of its own under %s", TargetLabel, Prefix)
	}
}
