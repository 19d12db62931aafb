package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// SourceLabelPrefix is the prefix under which a candidate carries its
// source pod's labels when its target does not keep them as they are: the
// source's app=web is label.multicluster.flotilla.dev/app=web on the
// candidate, so that the candidate's own pod selectors (rewritten with
// CarriedLabelKey) find its siblings while the target's Services,
// NetworkPolicies and controllers, which select app=web, do not.
const SourceLabelPrefix = "label." + Prefix

// maxLabelName is the longest name of a label key (the part after '/').
const maxLabelName = 63

// CarriedLabelKey is the key under which a candidate carries its source
// pod's label key, and under which the candidate's pod selectors select
// it: SourceLabelPrefix and the key with '/' replaced by '_'
// (app.kubernetes.io/name is label.multicluster.flotilla.dev/app.kubernetes.io_name).
// A name that would be longer than 63 characters or no label name is its
// first 52 valid characters, '-' and 10 hex digits of the key's SHA-256.
//
// Flotilla's own keys, under Prefix or SourceLabelPrefix, are not
// carried: ok is false and key is returned as it is, so that a selector
// of them is left alone and the mapping is idempotent.
//
// Prefixes never hold '_', so two keys share a carried key only when one
// is "p/n" and the other an unprefixed "p_n"; a pod with both carries the
// first in sorted order.
func CarriedLabelKey(key string) (carried string, ok bool) {
	if strings.HasPrefix(key, Prefix) || strings.HasPrefix(key, SourceLabelPrefix) {
		return key, false
	}
	name := strings.ReplaceAll(key, "/", "_")
	if validLabelName(name) {
		return SourceLabelPrefix + name, true
	}
	sum := sha256.Sum256([]byte(key))
	suffix := hex.EncodeToString(sum[:])[:10]
	head := make([]byte, 0, maxLabelName-len(suffix)-1)
	for i := 0; i < len(name) && len(head) < cap(head); i++ {
		c := name[i]
		switch {
		case alphanumeric(c):
			head = append(head, c)
		case len(head) == 0:
			// A name starts with a letter or a digit.
		case c == '-' || c == '_' || c == '.':
			head = append(head, c)
		default:
			head = append(head, '_')
		}
	}
	if len(head) == 0 {
		return SourceLabelPrefix + suffix, true
	}
	return SourceLabelPrefix + string(head) + "-" + suffix, true
}

// validLabelName reports whether name is the name part of a label key: 1
// to 63 of [A-Za-z0-9_.-], starting and ending with a letter or a digit.
func validLabelName(name string) bool {
	if name == "" || len(name) > maxLabelName || !alphanumeric(name[0]) || !alphanumeric(name[len(name)-1]) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !alphanumeric(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func alphanumeric(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
