// Package draw orders named choices by weighted rendezvous hashing: a
// draw without replacement in proportion to their weights, the same for
// one key wherever it is made, with no state. The fan-out draws a pod's
// targets with the pod's UID as the key, and a gang's choice draws its
// targets with the gang's key and attempt.
package draw

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"sort"
)

// Order returns items ordered for key: item x, named name(x), draws u in
// (0, 1) from a hash of the key and its name, and the order is by
// ln(u) ÷ weight(x), highest first, as a draw without replacement in
// proportion to the weights would order them; with equal weights it is
// the plain rendezvous order by u. A weight of zero or less counts as 1.
// Ties go by name, so the order does not depend on the order of items.
func Order[T any](key string, items []T, name func(T) string, weight func(T) float64) []T {
	type scored struct {
		item  T
		name  string
		score float64
	}
	s := make([]scored, len(items))
	for i, x := range items {
		w := weight(x)
		if w <= 0 {
			w = 1
		}
		n := name(x)
		// A cryptographic hash: FNV's high bits barely depend on the last
		// bytes, and names often differ only there ("t1", "t2").
		sum := sha256.Sum256([]byte(key + "\x00" + n))
		// 53 bits, as many as a float64 holds exactly; +1 keeps u above 0.
		u := (float64(binary.BigEndian.Uint64(sum[:8])>>11) + 1) / (1 << 53)
		s[i] = scored{x, n, math.Log(u) / w}
	}
	sort.Slice(s, func(i, j int) bool {
		if s[i].score != s[j].score {
			return s[i].score > s[j].score
		}
		return s[i].name < s[j].name
	})
	out := make([]T, len(s))
	for i := range s {
		out[i] = s[i].item
	}
	return out
}
