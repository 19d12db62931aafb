package protocol

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestCopyName(t *testing.T) {
	prefix := CopyNamePrefix("c1")
	if len(prefix) != len("flotilla-")+copyClusterHashLen+1 || !strings.HasPrefix(prefix, "flotilla-") || !strings.HasSuffix(prefix, "-") {
		t.Fatalf("CopyNamePrefix(c1) = %q", prefix)
	}
	if CopyNamePrefix("c2") == prefix {
		t.Fatal("two clusters share a prefix")
	}
	long := strings.Repeat("a", 200) + "." + strings.Repeat("b", 52)
	for _, tc := range []struct {
		name, cluster, original string
		// verbatim: the copy is the prefix and the name as it is.
		verbatim bool
	}{
		{"a name", "c1", "app-config", true},
		{"a dotted name", "c1", "ca.crt.bundle", true},
		{"a cluster name that is no DNS name", "Prod EU/1", "db", true},
		{"an empty cluster name", "", "db", true},
		{"the longest name that fits", "c1", strings.Repeat("a", validation.DNS1123SubdomainMaxLength-len(prefix)), true},
		{"one character more", "c1", strings.Repeat("a", validation.DNS1123SubdomainMaxLength-len(prefix)+1), false},
		{"the longest valid name", "c1", long, false},
		{"cut just after a dot", "c1", strings.Repeat("a", 215) + "." + strings.Repeat("b", 37), false},
		{"cut just after a dash", "c1", strings.Repeat("a", 215) + "-" + strings.Repeat("b", 37), false},
		{"upper case", "c1", "App_Config", false},
		{"nothing but dashes and dots", "c1", "-.-", false},
		{"empty", "c1", "", false},
		{"not ASCII", "c1", "cönfig", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CopyName(tc.cluster, tc.original)
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Fatalf("CopyName(%q, %q) = %q, not a DNS subdomain: %v", tc.cluster, tc.original, got, errs)
			}
			if !strings.HasPrefix(got, CopyNamePrefix(tc.cluster)) {
				t.Errorf("CopyName(%q, %q) = %q does not start with %q", tc.cluster, tc.original, got, CopyNamePrefix(tc.cluster))
			}
			if verbatim := got == CopyNamePrefix(tc.cluster)+tc.original; verbatim != tc.verbatim {
				t.Errorf("CopyName(%q, %q) = %q: verbatim %v, want %v", tc.cluster, tc.original, got, verbatim, tc.verbatim)
			}
			if got != CopyName(tc.cluster, tc.original) {
				t.Error("not deterministic")
			}
		})
	}
	// Shortened names stay apart by their hash.
	a, b := strings.Repeat("a", 300), strings.Repeat("a", 301)
	if CopyName("c1", a) == CopyName("c1", b) || CopyName("c1", "App") == CopyName("c1", "APP") {
		t.Error("two names shortened alike have one copy")
	}
}
