package protocol

import (
	"strings"
	"testing"
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
	a := CandidateName("c1", "ns", "web-1", "uid-1")
	if a != CandidateName("c1", "ns", "web-1", "uid-1") {
		t.Error("candidate name is not deterministic")
	}
	for _, other := range []string{
		CandidateName("c2", "ns", "web-1", "uid-1"),
		CandidateName("c1", "ns2", "web-1", "uid-1"),
		CandidateName("c1", "ns", "web-1", "uid-2"),
	} {
		if other == a {
			t.Errorf("different source pods share candidate name %s", a)
		}
	}
	long := CandidateName("c1", "ns", strings.Repeat("a", 250), "u")
	if len(long) > 63 {
		t.Errorf("candidate name %q longer than 63", long)
	}
}

func TestVirtualNodeName(t *testing.T) {
	if got := VirtualNodeName("", "c2"); got != "flotilla-c2" {
		t.Errorf("got %s", got)
	}
	if got := VirtualNodeName("team", "c2"); got != "flotilla-team-c2" {
		t.Errorf("got %s", got)
	}
	long := VirtualNodeName(strings.Repeat("n", 60), "t")
	if len(long) > 63 || long == VirtualNodeName(strings.Repeat("n", 61), "t") {
		t.Errorf("long names must be hashed to distinct DNS labels, got %s", long)
	}
}
