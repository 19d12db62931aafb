package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestCarriedLabelKey(t *testing.T) {
	hashOf := func(key string) string {
		sum := sha256.Sum256([]byte(key))
		return hex.EncodeToString(sum[:])[:10]
	}
	long := "example.com/" + strings.Repeat("n", 63)
	for _, tt := range []struct {
		name, key, want string
		notCarried      bool
	}{
		{name: "an unprefixed key", key: "app", want: "label.multicluster.flotilla.dev/app"},
		{name: "a prefixed key: '/' is '_'", key: "app.kubernetes.io/name", want: "label.multicluster.flotilla.dev/app.kubernetes.io_name"},
		{name: "underscores, dots and dashes stay", key: "a_b.c-d", want: "label.multicluster.flotilla.dev/a_b.c-d"},
		{name: "63 characters are a name", key: "a.b/" + strings.Repeat("x", 59), want: "label.multicluster.flotilla.dev/a.b_" + strings.Repeat("x", 59)},
		{name: "64 characters are hashed", key: "a.b/" + strings.Repeat("x", 60), want: "label.multicluster.flotilla.dev/a.b_" + strings.Repeat("x", 48) + "-" + hashOf("a.b/"+strings.Repeat("x", 60))},
		{name: "a long prefixed key is hashed", key: long, want: "label.multicluster.flotilla.dev/example.com_" + strings.Repeat("n", 40) + "-" + hashOf(long)},
		{name: "a character no name holds is '_'", key: "aé/x", want: "label.multicluster.flotilla.dev/a___x-" + hashOf("aé/x")},
		{name: "a name starts alphanumeric", key: "_x", want: "label.multicluster.flotilla.dev/x-" + hashOf("_x")},
		{name: "nothing alphanumeric leaves the hash", key: "/", want: "label.multicluster.flotilla.dev/" + hashOf("/")},
		{name: "the empty key", key: "", want: "label.multicluster.flotilla.dev/" + hashOf("")},
		{name: "Flotilla's key is not carried", key: ElectLabel, want: ElectLabel, notCarried: true},
		{name: "a carried key is not carried again", key: "label.multicluster.flotilla.dev/app", want: "label.multicluster.flotilla.dev/app", notCarried: true},
		{name: "a domain under Flotilla's is the user's", key: "x.multicluster.flotilla.dev/app", want: "label.multicluster.flotilla.dev/x.multicluster.flotilla.dev_app"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := CarriedLabelKey(tt.key)
			if got != tt.want || ok == tt.notCarried {
				t.Errorf("CarriedLabelKey(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, !tt.notCarried)
			}
			if errs := validation.IsQualifiedName(got); ok && len(errs) > 0 {
				t.Errorf("CarriedLabelKey(%q) = %q, no label key: %v", tt.key, got, errs)
			}
			if again, _ := CarriedLabelKey(got); again != got {
				t.Errorf("CarriedLabelKey(%q) = %q, carried again %q", tt.key, got, again)
			}
		})
	}
}

// FuzzCarriedLabelKey: whatever a source pod's label key, the key its
// candidate carries is a label key under SourceLabelPrefix.
func FuzzCarriedLabelKey(f *testing.F) {
	for _, seed := range []string{"app", "app.kubernetes.io/name", "", "/", "-", "a/b/c", strings.Repeat("é", 40), strings.Repeat("a.", 200) + "/x", ElectLabel} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		got, ok := CarriedLabelKey(key)
		if !ok {
			if got != key || !strings.HasPrefix(key, Prefix) && !strings.HasPrefix(key, SourceLabelPrefix) {
				t.Fatalf("CarriedLabelKey(%q) = %q did not carry a key that is not Flotilla's", key, got)
			}
			return
		}
		if !strings.HasPrefix(got, SourceLabelPrefix) || len(validation.IsQualifiedName(got)) > 0 {
			t.Fatalf("CarriedLabelKey(%q) = %q, no label key under %s: %v", key, got, SourceLabelPrefix, validation.IsQualifiedName(got))
		}
	})
}
