package gang

import (
	"fmt"
	"math"
	"sort"

	"github.com/flotilla-dev/flotilla/pkg/draw"
)

// Place is what the choice of a gang's targets knows of one target, as
// plain values.
type Place struct {
	// Name is the target's name.
	Name string
	// Cluster is the cluster the target reaches (its API server, or "self"):
	// two targets of one cluster are one place for the gang, or a member
	// would reserve twice in one cluster.
	Cluster string
	// Room is how many of the gang's members the target's published free
	// room holds; negative when the target publishes none.
	Room float64
	// Weight is the target's prospect beside the others of its tier (its
	// speed, the share of candidates it did not miss, the policy's
	// preference); zero or less weighs as 1.
	Weight float64
	// Unreachable is set while the target does not answer.
	Unreachable bool
}

// Choice is where a gang's members get candidates.
type Choice struct {
	// Targets are the targets chosen for the gang, best first. Under
	// OneCluster every member gets a candidate in each of them; under
	// AnyClusters each member draws its own among them.
	Targets []string
	// Fits is false when the targets the choice knows of cannot hold the
	// gang by their published room: under OneCluster no one of them can
	// (the gang waits in the roomiest ones), under AnyClusters not all of
	// them together can (whole members a target, every target's room
	// known). A gang that does not fit stands first only briefly
	// (Queue.NoFitHeadFor).
	Fits bool
	// Room is, under AnyClusters, the whole members of room the chosen
	// targets publish together; negative when one of them publishes none,
	// and under OneCluster (the room of several targets is no measure of
	// one's).
	Room float64
}

// Has reports whether target is among the chosen ones.
func (c Choice) Has(target string) bool {
	for _, t := range c.Targets {
		if t == target {
			return true
		}
	}
	return false
}

// Choose is where the gang's members get candidates: a function of the
// gang and of what its targets publish, the same for every member of one
// gang, so that the targets each hold the whole gang's candidates rather
// than each member drawing on its own. draw seeds the order among equals:
// the gang's key and its attempt, so that a gang that could not be
// completed draws other targets on its next attempt. pinned, when not
// empty, is the target the gang already stands in (under OneCluster, a
// member bound there): the gang goes there alone. limit bounds how many
// targets are chosen (0 or less: every one).
//
// Under OneCluster the targets whose room holds MinMember members come
// first (the order between them is a weighted draw), then those that
// publish no room; a target known to be too small is chosen only when no
// target is known to fit, roomiest first, so that the gang waits where it
// is likeliest to fit (and its candidates tell an autoscaler there what
// it lacks). Under AnyClusters every target is chosen, and each member
// draws limit of them as any pod does, in proportion to their room: the
// gang is split over the targets by their room; it fits when their whole
// members of room add up to MinMember.
//
// Targets that reach one cluster count once: the first of them in the
// order stands for the cluster. Unreachable targets are chosen only when
// every target is.
func Choose(spec Spec, draw string, pinned string, places []Place, limit int) Choice {
	if pinned != "" && spec.Mode != AnyClusters {
		return Choice{Targets: []string{pinned}, Fits: true, Room: -1}
	}
	ordered := drawOrder(draw, places)
	reachable := ordered[:0:0]
	for _, p := range ordered {
		if !p.Unreachable {
			reachable = append(reachable, p)
		}
	}
	if len(reachable) > 0 {
		ordered = reachable
	}
	ordered = oncePerCluster(ordered)
	if limit <= 0 || limit > len(ordered) {
		limit = len(ordered)
	}
	if spec.Mode == AnyClusters {
		// Each member draws its own among them, in proportion to their
		// room: the gang is split over the targets by their room.
		out := make([]string, len(ordered))
		room, known := 0.0, true
		for i, p := range ordered {
			out[i] = p.Name
			if p.Room < 0 {
				known = false
			}
			room += math.Floor(p.Room)
		}
		if !known {
			return Choice{Targets: out, Fits: true, Room: -1}
		}
		return Choice{Targets: out, Fits: room >= float64(spec.MinMember), Room: room}
	}
	need := float64(spec.MinMember)
	var fit, unknown, small []Place
	for _, p := range ordered {
		switch {
		case p.Room < 0:
			unknown = append(unknown, p)
		case p.Room >= need:
			fit = append(fit, p)
		default:
			small = append(small, p)
		}
	}
	tiers := append(fit, unknown...)
	fits := len(tiers) > 0
	if !fits {
		// The roomiest first; the draw breaks ties (a stable sort keeps it).
		sort.SliceStable(small, func(i, j int) bool { return small[i].Room > small[j].Room })
		tiers = small
	}
	out := make([]string, 0, limit)
	for _, p := range tiers[:min(limit, len(tiers))] {
		out = append(out, p.Name)
	}
	return Choice{Targets: out, Fits: fits, Room: -1}
}

// DrawKey is the seed of a gang's draw of targets on its attempt: the
// gang's key, then the attempt.
func DrawKey(key string, attempt int) string { return fmt.Sprintf("%s#%d", key, attempt) }

// drawOrder orders places by weighted rendezvous hashing of key, in
// proportion to their weights (draw.Order).
func drawOrder(key string, places []Place) []Place {
	return draw.Order(key, places, func(p Place) string { return p.Name }, func(p Place) float64 { return p.Weight })
}

// oncePerCluster keeps the first place of each cluster; a place that names
// no cluster is its own.
func oncePerCluster(places []Place) []Place {
	seen := map[string]bool{}
	out := places[:0:0]
	for _, p := range places {
		if p.Cluster != "" {
			if seen[p.Cluster] {
				continue
			}
			seen[p.Cluster] = true
		}
		out = append(out, p)
	}
	return out
}

// Share is the part of the choice's room that a gang needing need more
// members takes (Look.Share): 0 when the room is not known; more than 1
// when it does not fit.
func (c Choice) Share(need int) float64 {
	switch {
	case c.Room < 0 || need <= 0:
		return 0
	case c.Room == 0:
		return math.Inf(1)
	}
	return float64(need) / c.Room
}
