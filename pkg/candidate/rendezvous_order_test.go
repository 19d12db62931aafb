package candidate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRendezvousIgnoresInputOrder: a pod's order of the targets, and so
// the targets it draws, depend on its UID, the names and the weights,
// never on the order the views come in.
func TestRendezvousIgnoresInputOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vs := openViews(7)
	for i := range vs {
		// Some alike, some not.
		vs[i].Weight = []float64{1, 1, 0.1, 5, 5, 40, 0}[i]
	}
	for i := range 500 {
		uid := fmt.Sprintf("uid-%d", i)
		order := names(rendezvous(uid, vs))
		drawn := names(Eligible(vs, uid, 3))
		for range 5 {
			shuffled := slices.Clone(vs)
			rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
			if got := names(rendezvous(uid, shuffled)); got != order {
				t.Fatalf("%s: order %s from %s, %s from %s", uid, got, names(shuffled), order, names(vs))
			}
			if got := names(Eligible(shuffled, uid, 3)); got != drawn {
				t.Fatalf("%s: drew %s from %s, %s from %s", uid, got, names(shuffled), drawn, names(vs))
			}
		}
	}
}

// TestRendezvousEqualWeightsArePlain: when the weights are equal, whatever
// their value (zero: unweighed), the order is the plain rendezvous order.
func TestRendezvousEqualWeightsArePlain(t *testing.T) {
	weighed := func(w float64) []View {
		vs := openViews(5)
		for i := range vs {
			vs[i].Weight = w
		}
		return vs
	}
	for i := range 200 {
		uid := fmt.Sprintf("uid-%d", i)
		plain := names(rendezvous(uid, weighed(0)))
		for _, w := range []float64{1, 0.1, 32, -1} {
			if got := names(rendezvous(uid, weighed(w))); got != plain {
				t.Fatalf("%s: all weighing %v: %s, unweighed %s", uid, w, got, plain)
			}
		}
	}
}

// TestRendezvousDrawsByWeight: a pod's order is a draw without replacement
// in proportion to the weights, so each target comes first for its share
// of the pods, and second as often as such a draw puts it there; the
// prospects weigh as Prospect.Weight says.
func TestRendezvousDrawsByWeight(t *testing.T) {
	for _, tt := range []struct {
		name    string
		weights map[string]float64
		// first and second are each target's expected share of the pods
		// it comes first, and second, for.
		first, second map[string]float64
	}{{
		name:    "alike",
		weights: map[string]float64{"a": 1, "b": 1},
		first:   map[string]float64{"a": 0.5, "b": 0.5},
	}, {
		name:    "three times the weight",
		weights: map[string]float64{"a": 3, "b": 1},
		first:   map[string]float64{"a": 0.75, "b": 0.25},
	}, {
		// b first (¼), then a of a and c (⅓); c first (½), then a of a
		// and b (½): a is second for a third of the pods.
		name:    "without replacement",
		weights: map[string]float64{"a": 1, "b": 1, "c": 2},
		first:   map[string]float64{"a": 0.25, "b": 0.25, "c": 0.5},
		second:  map[string]float64{"a": 1.0 / 3, "b": 1.0 / 3, "c": 1.0 / 3},
	}, {
		name: "answering in 1 s gets twice the pods of 3 s",
		weights: map[string]float64{
			"fast": Prospect{Room: 10, Answer: time.Second}.Weight(),
			"slow": Prospect{Room: 10, Answer: 3 * time.Second}.Weight(),
		},
		first: map[string]float64{"fast": 2.0 / 3, "slow": 1.0 / 3},
	}, {
		name: "a preference of 100 is 32 times as likely first",
		weights: map[string]float64{
			"preferred": Prospect{Room: 1, Preference: 100}.Weight(),
			"plain":     Prospect{Room: 1}.Weight(),
		},
		first: map[string]float64{"preferred": 32.0 / 33, "plain": 1.0 / 33},
	}, {
		name: "a full target still comes first now and then",
		weights: map[string]float64{
			"full":  Prospect{Room: 0}.Weight(),
			"roomy": Prospect{Room: 9.9}.Weight(),
		},
		first: map[string]float64{"full": 0.01, "roomy": 0.99},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			var vs []View
			for name, w := range tt.weights {
				vs = append(vs, View{Name: name, Serves: true, Covers: true, Weight: w})
			}
			const pods = 20000
			first, second := map[string]int{}, map[string]int{}
			for i := range pods {
				order := rendezvous(fmt.Sprintf("uid-%d", i), vs)
				first[order[0].Name]++
				if len(order) > 2 {
					second[order[1].Name]++
				}
			}
			check := func(place string, want map[string]float64, got map[string]int) {
				for name, share := range want {
					// Within four standard deviations of a binomial share.
					tolerance := 4 * math.Sqrt(share*(1-share)/pods)
					if g := float64(got[name]) / pods; math.Abs(g-share) > tolerance {
						t.Errorf("%s is %s for %.4f of the pods, want %.4f ± %.4f (%v)", name, place, g, share, tolerance, got)
					}
				}
			}
			check("first", tt.first, first)
			check("second", tt.second, second)
		})
	}
}
