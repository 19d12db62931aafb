package protocol

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzCopyName: the cluster's name is an invitation's, the object's a
// source user's. Whatever they are, a copy's name is a valid DNS
// subdomain that starts with the cluster's prefix, and a name that fits
// is kept as it is.
func FuzzCopyName(f *testing.F) {
	for _, seed := range [][2]string{
		{"c1", "app-config"}, {"", ""}, {"Prod EU/1", "db"}, {"c1", strings.Repeat("a", 240)},
		{"c1", strings.Repeat("a.", 126) + "a"}, {"c1", "A_B"}, {"c1", "-.-"}, {"\x00", "\xff"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, cluster, name string) {
		got := CopyName(cluster, name)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Fatalf("CopyName(%q, %q) = %q, not a DNS subdomain: %v", cluster, name, got, errs)
		}
		prefix := CopyNamePrefix(cluster)
		if !strings.HasPrefix(got, prefix) {
			t.Fatalf("CopyName(%q, %q) = %q does not start with %q", cluster, name, got, prefix)
		}
		if len(validation.IsDNS1123Subdomain(prefix+name)) == 0 && got != prefix+name {
			t.Fatalf("CopyName(%q, %q) = %q, though %q fits", cluster, name, got, prefix+name)
		}
	})
}
