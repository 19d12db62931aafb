package placement

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// skewModel recomputes the spread rule by brute force over counts, sharing
// no code with Evaluate: every domain (known, placed or offered) at every
// level, with the number of siblings in it.
type skewModel struct {
	constraints []Constraint
	// counts[i] maps each level-i domain of the universe (its first i+1
	// values, in the test's own spelling) to the siblings in it.
	counts []map[string]int
	// parent[i] maps a level-i domain to its level-(i-1) domain.
	parent []map[string]string
}

// modelPrefix is the level-i domain of d: its first i+1 values, missing
// ones empty, in a spelling of the test's own; "" for level -1 (the root).
func modelPrefix(d Domain, i int) string {
	quoted := make([]string, i+1)
	for j := range quoted {
		v := ""
		if j < len(d) {
			v = d[j]
		}
		quoted[j] = strconv.Quote(v)
	}
	return strings.Join(quoted, ",")
}

// modelIn says whether d is in a level-i domain: a node without a key's
// label (an empty value) is in no domain of that key or the keys after it.
func modelIn(d Domain, i int) bool {
	for j := 0; j <= i; j++ {
		if j >= len(d) || d[j] == "" {
			return false
		}
	}
	return true
}

func newSkewModel(constraints []Constraint, known, placed []Domain, options []Option) *skewModel {
	m := &skewModel{constraints: constraints}
	universe := slices.Concat(known, placed)
	for _, o := range options {
		universe = append(universe, o.Domain)
	}
	for i := range constraints {
		m.counts = append(m.counts, map[string]int{})
		m.parent = append(m.parent, map[string]string{})
		for _, d := range universe {
			if !modelIn(d, i) {
				continue
			}
			m.counts[i][modelPrefix(d, i)] += 0
			m.parent[i][modelPrefix(d, i)] = modelPrefix(d, i-1)
		}
	}
	for _, d := range placed {
		m.place(d)
	}
	return m
}

func (m *skewModel) place(d Domain) {
	for i := range m.constraints {
		if modelIn(d, i) {
			m.counts[i][modelPrefix(d, i)]++
		}
	}
}

// siblings returns the counts of the level-i domains under one parent.
func (m *skewModel) siblings(i int, parent string) map[string]int {
	group := map[string]int{}
	for prefix, n := range m.counts[i] {
		if m.parent[i][prefix] == parent {
			group[prefix] = n
		}
	}
	return group
}

// allows says whether one more sibling in d keeps every DoNotSchedule
// level within its maxSkew: its domain's count after, against the fewest of
// its siblings after.
func (m *skewModel) allows(d Domain) bool {
	for i, c := range m.constraints {
		if c.WhenUnsatisfiable != DoNotSchedule {
			continue
		}
		if !modelIn(d, i) {
			return false
		}
		own := modelPrefix(d, i)
		after := m.siblings(i, modelPrefix(d, i-1))
		after[own]++
		if after[own]-slices.Min(slices.Collect(maps.Values(after))) > max(c.MaxSkew, 1) {
			return false
		}
	}
	return true
}

// skewed returns a DoNotSchedule level where the most and the fewest
// siblings among the domains of one parent differ by more than maxSkew; ""
// when there is none.
func (m *skewModel) skewed() string {
	for i, c := range m.constraints {
		if c.WhenUnsatisfiable != DoNotSchedule {
			continue
		}
		for _, parent := range m.parent[i] {
			group := m.siblings(i, parent)
			counts := slices.Collect(maps.Values(group))
			if skew := slices.Max(counts) - slices.Min(counts); skew > max(c.MaxSkew, 1) {
				return fmt.Sprintf("level %d (%s) under [%s]: %v, skew %d > maxSkew %d", i, c.TopologyKey, parent, group, skew, max(c.MaxSkew, 1))
			}
		}
	}
	return ""
}

// scenario is a random placement problem: clusters in domains of up to
// three levels, a few values per level.
type scenario struct {
	constraints []Constraint
	weight      int64
	known       []Domain
	options     []Option
}

func randomScenario(r *rand.Rand) scenario {
	var s scenario
	levels := 1 + r.IntN(3)
	for i := range levels {
		when := ScheduleAnyway
		if r.IntN(3) > 0 {
			when = DoNotSchedule
		}
		s.constraints = append(s.constraints, Constraint{
			TopologyKey: fmt.Sprintf("level-%d", i), MaxSkew: r.IntN(4), WhenUnsatisfiable: when,
		})
	}
	s.weight = int64(r.IntN(6))
	randomDomain := func() Domain {
		d := make(Domain, levels)
		for i := range d {
			// Zones of different regions share names on purpose.
			d[i] = fmt.Sprintf("v%d", r.IntN(3))
		}
		return d
	}
	for c := range 1 + r.IntN(6) {
		for range 1 + r.IntN(3) {
			d := randomDomain()
			s.options = append(s.options, Option{Cluster: fmt.Sprintf("c%d", c), Domain: d, Score: int64(r.IntN(101))})
			s.known = append(s.known, d)
		}
	}
	// Sometimes a domain that no option offers: it holds the minimum at 0.
	if r.IntN(4) == 0 {
		s.known = append(s.known, randomDomain())
	}
	return s
}

// Property 1: placing siblings one by one, always where Best says, never
// takes a DoNotSchedule level past its maxSkew, and Best gives up only when
// every option would.
func TestPropertyOneAtATimeKeepsMaxSkew(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 500 {
		s := randomScenario(r)
		model := newSkewModel(s.constraints, s.known, nil, s.options)
		var placed []Domain
		for range 20 {
			verdicts := Evaluate(s.constraints, s.weight, s.known, placed, s.options)
			best, ok := Best(verdicts)
			if !ok {
				for _, o := range s.options {
					if model.allows(o.Domain) {
						t.Fatalf("run %d: Best found nothing after %v, but %v keeps every maxSkew (%+v)", run, placed, o, verdicts)
					}
				}
				break
			}
			placed = append(placed, best.Domain)
			model.place(best.Domain)
			if problem := model.skewed(); problem != "" {
				t.Fatalf("run %d: %+v placed on %+v after %v: %s", run, best.Option, s.constraints, placed[:len(placed)-1], problem)
			}
		}
	}
}

// Property 2: the verdict of each option and Best's choice do not depend on
// the order of the options, the known domains or the placed siblings.
func TestPropertyOrderDoesNotMatter(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for run := range 500 {
		s := randomScenario(r)
		var placed []Domain
		for range r.IntN(8) {
			placed = append(placed, s.known[r.IntN(len(s.known))])
		}
		verdicts := Evaluate(s.constraints, s.weight, s.known, placed, s.options)
		best, ok := Best(verdicts)

		perm := r.Perm(len(s.options))
		options := make([]Option, len(s.options))
		for i, j := range perm {
			options[j] = s.options[i]
		}
		known, placedAgain := slices.Clone(s.known), slices.Clone(placed)
		r.Shuffle(len(known), func(i, j int) { known[i], known[j] = known[j], known[i] })
		r.Shuffle(len(placedAgain), func(i, j int) { placedAgain[i], placedAgain[j] = placedAgain[j], placedAgain[i] })

		shuffled := Evaluate(s.constraints, s.weight, known, placedAgain, options)
		for i, j := range perm {
			if diff := cmp.Diff(verdicts[i], shuffled[j]); diff != "" {
				t.Fatalf("run %d: the verdict of %+v changed with the order (-before +after):\n%s", run, s.options[i], diff)
			}
		}
		bestAgain, okAgain := Best(shuffled)
		if ok != okAgain || !cmp.Equal(best, bestAgain) {
			t.Fatalf("run %d: Best gave %+v, %v and, shuffled, %+v, %v", run, best, ok, bestAgain, okAgain)
		}
	}
}

// fuzzInput reads small values from the fuzzer's bytes; past the end it
// reads zeros, so every input decodes.
type fuzzInput []byte

func (in *fuzzInput) next() byte {
	if len(*in) == 0 {
		return 0
	}
	b := (*in)[0]
	*in = (*in)[1:]
	return b
}

func (in *fuzzInput) int64() int64 {
	switch b := in.next(); b {
	case 0xff:
		return math.MaxInt64
	case 0xfe:
		return math.MinInt64
	default:
		return int64(int8(b))
	}
}

func (in *fuzzInput) domain(levels int) Domain {
	// Values that are empty, share a prefix, or hold the Key's separator.
	values := []string{"", "a", "b", "a\x00", "\x00", "\x01", "a\x00b"}
	d := make(Domain, int(in.next())%(levels+2))
	for i := range d {
		d[i] = values[int(in.next())%len(values)]
	}
	return d
}

func decodeEvaluateInput(data []byte) (constraints []Constraint, weight int64, known, placed []Domain, options []Option) {
	in := fuzzInput(data)
	levels := int(in.next()) % 4
	for i := range levels {
		whens := []string{DoNotSchedule, ScheduleAnyway, "", "Sometimes"}
		constraints = append(constraints, Constraint{
			TopologyKey: fmt.Sprintf("k%d", i), MaxSkew: int(int8(in.next())), WhenUnsatisfiable: whens[int(in.next())%len(whens)],
		})
	}
	weight = in.int64()
	for range int(in.next()) % 6 {
		known = append(known, in.domain(levels))
	}
	for range int(in.next()) % 10 {
		placed = append(placed, in.domain(levels))
	}
	for range int(in.next()) % 8 {
		clusters := []string{"c1", "c2", "c3", ""}
		options = append(options, Option{Cluster: clusters[int(in.next())%len(clusters)], Domain: in.domain(levels), Score: in.int64()})
	}
	return constraints, weight, known, placed, options
}

// FuzzEvaluate: whatever the input, Evaluate does not panic, excludes
// exactly what the brute-force model says, keeps spreads in range and
// totals without wrapping, and Best's choice does not depend on the order.
func FuzzEvaluate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 1, 0, 1, 1, 2, 3, 2, 1, 2, 2, 2, 1, 3, 0, 0, 2, 1, 1, 4, 0, 2, 1, 1, 50, 1, 2, 1, 2, 0})
	f.Add([]byte{3, 0x81, 0, 0, 1, 0xff, 0, 0xff, 5, 4, 3, 4, 2, 1, 0, 6, 9, 1, 0, 1, 3, 0xfe, 2, 3, 0, 0, 0, 0xff})
	f.Add([]byte{1, 1, 0, 0xfe, 2, 1, 1, 1, 2, 3, 1, 1, 1, 1, 1, 1, 2, 1, 2, 3, 2, 0, 1, 1, 0, 9, 1, 2, 1, 2, 3})
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, seed))
		data := make([]byte, 64)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		constraints, weight, known, placed, options := decodeEvaluateInput(data)
		verdicts := Evaluate(constraints, weight, known, placed, options)
		if len(verdicts) != len(options) {
			t.Fatalf("%d verdicts for %d options", len(verdicts), len(options))
		}
		model := newSkewModel(constraints, known, placed, options)
		anyChoosable := false
		for i, v := range verdicts {
			if !cmp.Equal(v.Option, options[i]) {
				t.Fatalf("verdict %d is of %+v, not of %+v", i, v.Option, options[i])
			}
			if allowed := model.allows(v.Domain); allowed != (v.Excluded == "") {
				t.Fatalf("%+v under %+v after %v (known %v): excluded %q, but the model allows it: %v", v.Option, constraints, placed, known, v.Excluded, allowed)
			}
			if v.Spread < -100 || v.Spread > 100 {
				t.Fatalf("%+v: spread %d out of [-100, 100]", v.Option, v.Spread)
			}
			if v.Excluded != "" {
				if v.Spread != 0 || v.Total != v.Score {
					t.Fatalf("excluded %+v has spread %d and total %d", v.Option, v.Spread, v.Total)
				}
				continue
			}
			anyChoosable = true
			total := new(big.Int).Mul(big.NewInt(max(weight, 0)), big.NewInt(v.Spread))
			total.Add(total, big.NewInt(v.Score))
			want := total.Int64()
			if total.Cmp(big.NewInt(math.MaxInt64)) > 0 {
				want = math.MaxInt64
			} else if total.Cmp(big.NewInt(math.MinInt64)) < 0 {
				want = math.MinInt64
			}
			if v.Total != want {
				t.Fatalf("%+v: total %d, want weight %d * spread %d + score, saturated: %d", v.Option, v.Total, weight, v.Spread, want)
			}
		}

		best, ok := Best(verdicts)
		if ok != anyChoosable {
			t.Fatalf("Best found one: %v; some option may be chosen: %v", ok, anyChoosable)
		}
		for _, v := range verdicts {
			if ok && v.Excluded == "" && v.Total > best.Total {
				t.Fatalf("Best chose %+v over %+v", best, v)
			}
		}
		again, okAgain := Best(Evaluate(constraints, weight, reversed(known), reversed(placed), reversed(options)))
		if ok != okAgain || !cmp.Equal(best, again) {
			t.Fatalf("Best gave %+v, %v and, reversed, %+v, %v", best, ok, again, okAgain)
		}
	})
}
