package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// copyClusterHashLen is how many hex digits of the source cluster's hash
// begin its copies' names: 64 bits, so that no one finds a cluster name
// whose prefix is another's (a target's policy tells the sources' copies
// apart by it).
const copyClusterHashLen = 16

// CopyNamePrefix begins the name of every copy a source cluster makes of
// its ConfigMaps and Secrets in a target: "flotilla-", 16 hex digits of
// the SHA-256 of the cluster's name (which need not be a DNS name) and
// "-". A target's admission policy lets the source create no ConfigMap or
// Secret of another name, and its candidates reference none, so that a
// candidate mounts the source's copies and never the target's own objects.
func CopyNamePrefix(sourceCluster string) string {
	sum := sha256.Sum256([]byte(sourceCluster))
	return "flotilla-" + hex.EncodeToString(sum[:])[:copyClusterHashLen] + "-"
}

// CopyName is the name, in a target, of a source cluster's copy of its
// ConfigMap or Secret name: CopyNamePrefix and the name. When that is not
// a valid DNS subdomain (longer than 253 characters, or a name that was
// not valid to begin with) it is shortened deterministically: the prefix,
// as much of the name as fits (its characters other than a-z, 0-9 and '-'
// made '-' if it is not a valid name), '-' and 10 hex digits of the
// name's SHA-256.
func CopyName(sourceCluster, name string) string {
	prefix := CopyNamePrefix(sourceCluster)
	if whole := prefix + name; len(validation.IsDNS1123Subdomain(whole)) == 0 {
		return whole
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	kept := name
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		kept = strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, name)
	}
	if room := validation.DNS1123SubdomainMaxLength - len(prefix) - len(suffix); len(kept) > room {
		kept = kept[:room]
	}
	// A valid name cut short ends in a letter or digit once its last '-'
	// and '.' are gone, as every label of a DNS subdomain must.
	return prefix + strings.TrimRight(kept, "-.") + suffix
}
