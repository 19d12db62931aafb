package placement

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
)

const (
	DoNotSchedule  = "DoNotSchedule"
	ScheduleAnyway = "ScheduleAnyway"
)

// Constraint spreads a workload's pods over the values of one topology key.
type Constraint struct {
	TopologyKey       string
	MaxSkew           int    // >= 1; values < 1 are treated as 1
	WhenUnsatisfiable string // DoNotSchedule or ScheduleAnyway ("" means ScheduleAnyway)
}

// Domain is a topology tuple: the values of the constraints' keys, in the
// constraints' order (region, then zone). Two regions may have zones of the
// same name: they are different domains because the tuples differ.
type Domain []string

const (
	// keySeparator joins a Domain's values in its Key. Label values cannot
	// hold it, nor keyEscape; a value that does anyway (a hostile summary)
	// is escaped, so that two different domains never share a Key.
	keySeparator = "\x00"
	keyEscape    = "\x01"
)

// keyEscaper maps the two reserved bytes to two-byte codes that sort above
// the separator and in the same order as the bytes they stand for, so that
// Keys sort like their tuples (Domains relies on that for its cap).
var keyEscaper = strings.NewReplacer(keySeparator, keyEscape+"\x01", keyEscape, keyEscape+"\x02")

func escapeValue(v string) string {
	if !strings.ContainsAny(v, keySeparator+keyEscape) {
		return v
	}
	return keyEscaper.Replace(v)
}

// Key returns a string form usable as a map key: the values joined with
// "\x00", which cannot occur in label values. Keys of domains of the same
// length sort like the domains (value by value).
func (d Domain) Key() string {
	escaped := make([]string, len(d))
	for i, v := range d {
		escaped[i] = escapeValue(v)
	}
	return strings.Join(escaped, keySeparator)
}

// Option is one place a candidate could go: a cluster in one domain.
// A cluster that spans several domains (a target with nodes in two zones)
// gives one Option per domain.
type Option struct {
	Cluster string
	Domain  Domain
	// Score is the cluster's own score for this pod (the target scheduler's
	// reservation score, plus preferred-affinity weights); the spread score
	// times the weight is added to it.
	Score int64
}

// Verdict is the evaluation of one Option.
type Verdict struct {
	Option
	// Excluded says why the option may not be chosen; "" when it may.
	Excluded string
	// Spread is the option's normalized spread score in [-100, 100].
	Spread int64
	// Total is weight*Spread + Score.
	Total int64
}

const (
	// levelScoreBits is the width of one level in the combined raw score:
	// a level scores 0..maxLevelScore, and shifting each earlier level above
	// all later ones makes one pod of imbalance in a region outweigh any
	// imbalance among zones.
	levelScoreBits = 6
	maxLevelScore  = 1<<levelScoreBits - 1
)

// Evaluate weighs each option against the domains where the workload's
// siblings already are (placed: one Domain per sibling, elected or bound).
// known lists every domain the eligible clusters offer, so a domain with no
// sibling yet counts in the skew (a domain of placed that is not in known
// counts too, and so does an option's own domain). With no constraints every
// option gets Spread 0.
//
// Domains are read at the constraints' length: a missing value is "", a
// value past the last constraint is ignored.
func Evaluate(constraints []Constraint, weight int64, known []Domain, placed []Domain, options []Option) []Verdict {
	weight = max(weight, 0)
	t := newTally(len(constraints), known, placed, options)

	verdicts := make([]Verdict, len(options))
	raws := make([]*big.Int, len(options))
	var minRaw, maxRaw *big.Int
	for i, o := range options {
		excluded, raw := t.weigh(constraints, o.Domain)
		verdicts[i] = Verdict{Option: o, Excluded: excluded, Total: o.Score}
		if excluded != "" {
			continue
		}
		raws[i] = raw
		if minRaw == nil || raw.Cmp(minRaw) < 0 {
			minRaw = raw
		}
		if maxRaw == nil || raw.Cmp(maxRaw) > 0 {
			maxRaw = raw
		}
	}
	if minRaw == nil {
		return verdicts
	}
	// The spread score is normalized among the options that may be chosen
	// only: an excluded option's raw score must not stretch the scale.
	span := new(big.Int).Sub(maxRaw, minRaw)
	for i := range verdicts {
		if raws[i] == nil {
			continue
		}
		if span.Sign() > 0 {
			scaled := new(big.Int).Sub(raws[i], minRaw)
			scaled.Mul(scaled, big.NewInt(200)).Quo(scaled, span)
			verdicts[i].Spread = scaled.Int64() - 100
		}
		verdicts[i].Total = total(weight, verdicts[i].Spread, verdicts[i].Score)
	}
	return verdicts
}

// Best returns the non-excluded verdict with the highest Total; ties go to
// the higher Score, then the smaller cluster name, then the smaller
// Domain.Key(), so the result never depends on the order of options. false
// when all are excluded.
func Best(verdicts []Verdict) (Verdict, bool) {
	var best Verdict
	found := false
	for _, v := range verdicts {
		if v.Excluded != "" {
			continue
		}
		if !found || outranks(v, best) {
			best, found = v, true
		}
	}
	return best, found
}

// BestPerCluster picks, for each cluster with an option not excluded, its
// best one: the higher Total, then the smaller Domain.Key() (a cluster
// spanning several domains is counted, and its candidate pinned, in that
// one). excluded says why, for each cluster all of whose options are
// excluded, the last of them is.
func BestPerCluster(verdicts []Verdict) (best map[string]Verdict, excluded map[string]string) {
	best, excluded = map[string]Verdict{}, map[string]string{}
	for _, v := range verdicts {
		if v.Excluded != "" {
			excluded[v.Cluster] = v.Excluded
			continue
		}
		if b, ok := best[v.Cluster]; !ok || v.Total > b.Total || v.Total == b.Total && v.Domain.Key() < b.Domain.Key() {
			best[v.Cluster] = v
		}
	}
	for name := range best {
		delete(excluded, name)
	}
	return best, excluded
}

func outranks(a, b Verdict) bool {
	return cmp.Or(
		cmp.Compare(b.Total, a.Total),
		cmp.Compare(b.Score, a.Score),
		strings.Compare(a.Cluster, b.Cluster),
		strings.Compare(a.Domain.Key(), b.Domain.Key()),
		// Only Domain{} and Domain{""} share a Key.
		cmp.Compare(len(a.Domain), len(b.Domain)),
	) < 0
}

// tally holds, per level, how many siblings each domain has and which
// domains are siblings of one another.
type tally struct {
	levels []level
}

type level struct {
	// count is the number of placed siblings per domain, by prefix key.
	count map[string]int
	// groups are the domains sharing a parent, by the parent's prefix key,
	// each sorted fewest siblings first.
	groups map[string][]member
}

type member struct {
	value string // the domain's own value at this level (the zone, not the region)
	key   string
	count int
}

// prefixKeys returns the Key of d[:i+1] for each level i, reading d at the
// given length.
func prefixKeys(d Domain, levels int) []string {
	keys := make([]string, levels)
	var b strings.Builder
	for i := range levels {
		if i > 0 {
			b.WriteString(keySeparator)
		}
		b.WriteString(escapeValue(valueAt(d, i)))
		keys[i] = b.String()
	}
	return keys
}

func valueAt(d Domain, i int) string {
	if i < len(d) {
		return d[i]
	}
	return ""
}

// depth is how many levels of d are a domain: a node without a key's
// label (an empty value) is in no domain of that key, nor of the keys after
// it, as kube-scheduler counts no pod on a node without the constraint's
// key and offers no such node a place.
func depth(d Domain, levels int) int {
	for i := range levels {
		if valueAt(d, i) == "" {
			return i
		}
	}
	return levels
}

func newTally(levels int, known, placed []Domain, options []Option) tally {
	t := tally{levels: make([]level, levels)}
	for i := range t.levels {
		t.levels[i] = level{count: map[string]int{}, groups: map[string][]member{}}
	}
	for _, d := range placed {
		for i, key := range prefixKeys(d, levels)[:depth(d, levels)] {
			t.levels[i].count[key]++
		}
	}

	seen := make([]map[string]bool, levels)
	for i := range seen {
		seen[i] = map[string]bool{}
	}
	add := func(d Domain) {
		keys := prefixKeys(d, levels)
		for i, key := range keys[:depth(d, levels)] {
			if seen[i][key] {
				continue
			}
			seen[i][key] = true
			parent := ""
			if i > 0 {
				parent = keys[i-1]
			}
			lv := &t.levels[i]
			lv.groups[parent] = append(lv.groups[parent], member{value: valueAt(d, i), key: key, count: lv.count[key]})
		}
	}
	for _, d := range known {
		add(d)
	}
	for _, d := range placed {
		add(d)
	}
	for _, o := range options {
		add(o.Domain)
	}

	for _, lv := range t.levels {
		for _, group := range lv.groups {
			slices.SortFunc(group, func(a, b member) int {
				return cmp.Or(cmp.Compare(a.count, b.count), strings.Compare(a.key, b.key))
			})
		}
	}
	return t
}

// weigh returns why a sibling may not go to domain d ("" when it may) and
// its raw spread score: one base-64 digit per level, earlier levels first.
// The raw score is a big.Int because eleven levels would overflow int64;
// policies have two or three, but the input is not trusted to.
func (t tally) weigh(constraints []Constraint, d Domain) (excluded string, raw *big.Int) {
	raw = new(big.Int)
	keys := prefixKeys(d, len(t.levels))
	in := depth(d, len(t.levels))
	for i, key := range keys {
		if i >= in {
			// No domain of this key: the lowest score, and no place under
			// DoNotSchedule.
			raw.Lsh(raw, levelScoreBits)
			if c := constraints[i]; excluded == "" && c.WhenUnsatisfiable == DoNotSchedule {
				excluded = fmt.Sprintf("its node has no %s label", c.TopologyKey)
			}
			continue
		}
		lv := t.levels[i]
		parent := ""
		if i > 0 {
			parent = keys[i-1]
		}
		group := lv.groups[parent]
		count := lv.count[key]

		levelScore := maxLevelScore - min(max(count-group[0].count, 0), maxLevelScore)
		raw.Lsh(raw, levelScoreBits).Add(raw, big.NewInt(int64(levelScore)))

		c := constraints[i]
		if excluded != "" || c.WhenUnsatisfiable != DoNotSchedule {
			continue
		}
		// The skew is taken as if the sibling were already there: its own
		// domain with one more, the others as they are. The fewest among the
		// others is the first of the sorted group that is not its own domain.
		fewest := slices.IndexFunc(group, func(m member) bool { return m.key != key })
		if fewest < 0 {
			continue
		}
		other := group[fewest]
		maxSkew := max(c.MaxSkew, 1)
		if count+1-other.count > maxSkew {
			excluded = fmt.Sprintf("%s=%s would have %d pods against %d in %s (maxSkew %d)",
				c.TopologyKey, showValue(valueAt(d, i)), count+1, other.count, showValue(other.value), maxSkew)
		}
	}
	return excluded, raw
}

// showValue makes an empty value (a cluster without the key) visible in a
// reason.
func showValue(v string) string {
	if v == "" {
		return `""`
	}
	return v
}

// total is weight*spread + score, clamped to int64: a weight too large
// for int64 must not wrap the best option around to the worst.
func total(weight, spread, score int64) int64 {
	exact := new(big.Int).Mul(big.NewInt(weight), big.NewInt(spread))
	exact.Add(exact, big.NewInt(score))
	switch {
	case exact.Cmp(big.NewInt(math.MaxInt64)) > 0:
		return math.MaxInt64
	case exact.Cmp(big.NewInt(math.MinInt64)) < 0:
		return math.MinInt64
	}
	return exact.Int64()
}
