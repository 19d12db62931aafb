package protocol

import (
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Two targets of one source name the candidates of one source pod apart,
// whatever the names, and the name stays a pod name the API server takes:
// 63 characters at most, a DNS label when the source pod's name is one
// (a subdomain when it is one with dots).
func FuzzCandidateNameTargets(f *testing.F) {
	for _, seed := range [][5]string{
		{"src", "self", "team-a/self", "team-a", "web-7d9f-x2"},
		{"src", "t1", "t2", "shop", "a"},
		{"c", "eu/t", "eu/t2", "ns", "web.v1"},
		{"c", "a", "b", "ns", "x123456789-123456789-123456789-123456789-123456789-1-3456789-12"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4], "uid-1")
	}
	f.Fuzz(func(t *testing.T, cluster, target, other, namespace, name, uid string) {
		if len(validation.IsDNS1123Subdomain(name)) > 0 {
			return // no pod has that name
		}
		a := CandidateName(cluster, target, namespace, name, uid)
		if a != CandidateName(cluster, target, namespace, name, uid) {
			t.Fatalf("CandidateName is not deterministic for %q", target)
		}
		valid := validation.IsDNS1123Subdomain
		if len(validation.IsDNS1123Label(name)) == 0 {
			valid = validation.IsDNS1123Label
		}
		if errs := valid(a); len(errs) > 0 || len(a) > 63 {
			t.Fatalf("CandidateName(%q, %q, %q, %q, %q) = %q, not a valid name: %v", cluster, target, namespace, name, uid, a, errs)
		}
		if target != other && a == CandidateName(cluster, other, namespace, name, uid) {
			t.Fatalf("targets %q and %q share the candidate name %q of %s/%s", target, other, a, namespace, name)
		}
		if target != other && TargetLabelValue(target) == TargetLabelValue(other) {
			t.Fatalf("targets %q and %q share the label value %q", target, other, TargetLabelValue(target))
		}
	})
}

// TestCandidateNameIsStable pins a candidate's name: an agent upgraded
// must find the candidates its predecessor made, so the name is part of
// the protocol and no rewrite of CandidateName may change it.
func TestCandidateNameIsStable(t *testing.T) {
	if got := CandidateName("src", "t1", "ns", "web-0", "0b6f1c2e-uid"); got != "web-0-9a52bba584" {
		t.Fatalf("CandidateName = %q, want web-0-9a52bba584", got)
	}
}

// A remembered name is the name made, before and after the memory is
// full and forgotten, and the memory stays within its bound.
func TestCandidateNamesRemembered(t *testing.T) {
	for i := range maxCandidateNames + 10 {
		uid := "uid-" + strconv.Itoa(i)
		for range 2 {
			if got, want := CandidateName("src", "t1", "ns", "web", uid), candidateName("src", "t1", "ns", "web", uid); got != want {
				t.Fatalf("CandidateName of %s = %q, want %q", uid, got, want)
			}
		}
	}
	if n := candidateNames.len(); n > maxCandidateNames {
		t.Fatalf("%d names remembered, want at most %d", n, maxCandidateNames)
	}
}
