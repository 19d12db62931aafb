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

// Order returns the indexes 0..n-1 ordered for key: choice i, named
// name(i), draws u in (0, 1) from a hash of the key and its name, and the
// order is by ln(u) ÷ weight(i), highest first, as a draw without
// replacement in proportion to the weights would order them; with equal
// weights it is the plain rendezvous order by u. A weight of zero or less
// counts as 1. Ties go by name, so the order does not depend on the order
// of the choices.
func Order(key string, n int, name func(i int) string, weight func(i int) float64) []int {
	score := make([]float64, n)
	idx := make([]int, n)
	for i := range n {
		w := weight(i)
		if w <= 0 {
			w = 1
		}
		// A cryptographic hash: FNV's high bits barely depend on the last
		// bytes, and names often differ only there ("t1", "t2").
		sum := sha256.Sum256([]byte(key + "\x00" + name(i)))
		// 53 bits, as many as a float64 holds exactly; +1 keeps u above 0.
		u := (float64(binary.BigEndian.Uint64(sum[:8])>>11) + 1) / (1 << 53)
		score[i], idx[i] = math.Log(u)/w, i
	}
	sort.Slice(idx, func(a, b int) bool {
		i, j := idx[a], idx[b]
		if score[i] != score[j] {
			return score[i] > score[j]
		}
		return name(i) < name(j)
	})
	return idx
}
