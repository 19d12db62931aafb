package draw

import (
	"slices"
	"testing"
)

// TestOrderIgnoresTheChoicesOrder: one key orders the same names the same
// way whatever order they come in, and weights skew who comes first.
func TestOrderIgnoresTheChoicesOrder(t *testing.T) {
	names := []string{"t1", "t2", "t3", "t4"}
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	self := func(n string) string { return n }
	ordered := func(ns []string, w func(string) float64) []string { return Order("key", ns, self, w) }
	even := func(string) float64 { return 1 }
	if a, b := ordered(names, even), ordered(reversed, even); !slices.Equal(a, b) {
		t.Fatalf("one key, two orders: %v and %v", a, b)
	}
	first := map[string]int{}
	for k := range 1000 {
		o := Order(string(rune('a'+k%26))+string(rune(k)), names, self, func(n string) float64 {
			if n == "t3" {
				return 10
			}
			return 1
		})
		first[o[0]]++
	}
	if first["t3"] < 700 {
		t.Fatalf("a choice weighing 10 against three of 1 came first %d times of 1000: %v", first["t3"], first)
	}
}
