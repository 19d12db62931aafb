package placement

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
)

// Cluster is a target as placement sees it.
type Cluster struct {
	Name string
	// Labels: the target's virtual node labels (the Target's labels and the
	// labels common to all its nodes).
	Labels map[string]string
	// Topology: per topology key, the values the target's nodes have (from
	// its ClusterSummary), for keys its Labels do not carry.
	Topology map[string][]string
	// LargestFree: the most of each resource free on any one of its nodes
	// (from its ClusterSummary); nil when it does not say.
	LargestFree corev1.ResourceList
	// Combinations: the combinations of topology values its nodes carry
	// (from its ClusterSummary's domains); nil when it does not say, and
	// Domains then takes every combination of Topology's values.
	Combinations []Combination
}

// Combination is one combination of topology values some node of a
// cluster carries.
type Combination struct {
	// Values: topology key to value; a key the nodes lack is absent.
	Values map[string]string
	// Open: some node with it takes pods. A domain only closed nodes are in
	// (cordoned, NotReady) is counted by a spread but offered no pod.
	Open bool
}

// maxDomainsPerCluster caps what one cluster offers: its summary comes from
// the target, and a few keys with many values each would otherwise make a
// cross product large enough to stall the agent.
const maxDomainsPerCluster = 64

// Domains returns the domains a cluster offers pods for the keys: a key's
// value comes from Labels; otherwise, when the cluster says which
// combinations its nodes carry, each open combination's (a key it lacks
// gives ""); otherwise each value of Topology[key] (a cluster spanning
// zones offers each), taken in every combination; a key with neither
// gives the value "" (the cluster is then in an unnamed domain of that
// level). At most 64 domains (the first in sorted order), so a hostile
// summary cannot blow them up. Sorted by Domain.Key(), deduplicated.
func Domains(c Cluster, keys []string) []Domain {
	if c.Combinations != nil {
		return combined(c, keys, false)
	}
	return product(c, keys)
}

// CountedDomains returns the domains of a cluster a spread counts: those
// it offers pods (Domains), and those only its nodes that take no pods
// are in, as kube-scheduler counts every node's domain.
func CountedDomains(c Cluster, keys []string) []Domain {
	if c.Combinations != nil {
		return combined(c, keys, true)
	}
	return product(c, keys)
}

// combined projects the cluster's combinations (the open ones, or all)
// onto the keys, Labels first.
func combined(c Cluster, keys []string, closed bool) []Domain {
	seen := map[string]bool{}
	var domains []Domain
	for _, comb := range c.Combinations {
		if !comb.Open && !closed {
			continue
		}
		d := make(Domain, len(keys))
		for i, key := range keys {
			if v, ok := c.Labels[key]; ok {
				d[i] = v
			} else {
				d[i] = comb.Values[key]
			}
		}
		if !seen[d.Key()] {
			seen[d.Key()] = true
			domains = append(domains, d)
		}
	}
	slices.SortFunc(domains, func(a, b Domain) int { return strings.Compare(a.Key(), b.Key()) })
	return domains[:min(len(domains), maxDomainsPerCluster)]
}

// product is every combination of the values the cluster has per key.
func product(c Cluster, keys []string) []Domain {
	values := make([][]string, len(keys))
	for i, key := range keys {
		values[i] = domainValues(c, key)
	}

	// Walking the product like an odometer over sorted values yields the
	// domains in Key order (Keys sort like tuples), so the walk can stop at
	// the cap without building the rest.
	var domains []Domain
	at := make([]int, len(keys))
	for len(domains) < maxDomainsPerCluster {
		d := make(Domain, len(keys))
		for i, j := range at {
			d[i] = values[i][j]
		}
		domains = append(domains, d)

		i := len(at) - 1
		for ; i >= 0; i-- {
			at[i]++
			if at[i] < len(values[i]) {
				break
			}
			at[i] = 0
		}
		if i < 0 {
			break
		}
	}
	return domains
}

// domainValues returns the sorted, distinct values a cluster has for one
// key, never empty. Only the smallest maxDomainsPerCluster can be in the
// first maxDomainsPerCluster domains, so no more are kept.
func domainValues(c Cluster, key string) []string {
	if v, ok := c.Labels[key]; ok {
		return []string{v}
	}
	values := slices.Clone(c.Topology[key])
	if len(values) == 0 {
		return []string{""}
	}
	slices.Sort(values)
	values = slices.Compact(values)
	return values[:min(len(values), maxDomainsPerCluster)]
}

// Selector decides which clusters may get a pod. All selectors are
// labels.Selector from k8s.io/apimachinery/pkg/labels (nil means everything).
type Selector struct {
	// Cluster must match (the policy's clusterSelector).
	Cluster labels.Selector
	// Required: a cluster must match at least one, when there are any
	// (clusterAffinity.required, terms ORed).
	Required []labels.Selector
	// Preferred adds Weight to the score of clusters that match.
	Preferred []Preference
	// Groups are ordered fallback groups: first the clusters matching
	// Groups[0], then those matching Groups[1]... A cluster matching none
	// is not eligible when there are groups. A cluster in several goes in
	// the first it matches.
	Groups []labels.Selector
}

type Preference struct {
	Weight   int64
	Selector labels.Selector
}

func matches(s labels.Selector, c Cluster) bool {
	return s == nil || s.Matches(labels.Set(c.Labels))
}

// Select splits the clusters into ordered groups of eligible clusters
// (one group when Groups is empty) and the excluded ones with the reason
// (e.g. "does not match clusterSelector region=eu", "matches no required
// clusterAffinity term", "in no fallback group"). Empty groups are dropped.
// Order inside a group is by cluster name.
func Select(s Selector, clusters []Cluster) (groups [][]Cluster, excluded map[string]string) {
	excluded = map[string]string{}
	groups = make([][]Cluster, max(len(s.Groups), 1))
	for _, c := range clusters {
		if !matches(s.Cluster, c) {
			excluded[c.Name] = "does not match clusterSelector " + s.Cluster.String()
			continue
		}
		if len(s.Required) > 0 && !slices.ContainsFunc(s.Required, func(r labels.Selector) bool { return matches(r, c) }) {
			excluded[c.Name] = "matches no required clusterAffinity term"
			continue
		}
		group := 0
		if len(s.Groups) > 0 {
			group = slices.IndexFunc(s.Groups, func(g labels.Selector) bool { return matches(g, c) })
			if group < 0 {
				excluded[c.Name] = "in no fallback group"
				continue
			}
		}
		groups[group] = append(groups[group], c)
	}

	groups = slices.DeleteFunc(groups, func(g []Cluster) bool { return len(g) == 0 })
	for _, g := range groups {
		slices.SortStableFunc(g, func(a, b Cluster) int { return strings.Compare(a.Name, b.Name) })
	}
	return groups, excluded
}

// PreferenceScore is the sum of the weights of the preferences the cluster matches.
func PreferenceScore(s Selector, c Cluster) int64 {
	var score int64
	for _, p := range s.Preferred {
		if matches(p.Selector, c) {
			score += p.Weight
		}
	}
	return score
}

// Unfit says why no node of a cluster can meet a pod's required node
// affinity, as far as the cluster's Topology tells (the values its nodes
// have for the keys its ClusterSummary reports); "" when some term may be
// met or the Topology does not say. Terms are ORed: every term must be
// unmet. Only In requirements on a key the Topology reports are judged: a
// key it does not report may still be on its nodes.
func Unfit(c Cluster, required *corev1.NodeSelector) string {
	if required == nil || len(required.NodeSelectorTerms) == 0 || len(c.Topology) == 0 {
		return ""
	}
	first := ""
	for _, term := range required.NodeSelectorTerms {
		why := unmet(c, term)
		if why == "" {
			return ""
		}
		if first == "" {
			first = why
		}
	}
	return first
}

// ForPod keeps of c's Combinations those whose nodes the pod's node
// selector and required node affinity may match, as kube-scheduler's
// spread counts only the nodes a pod may use (nodeAffinityPolicy Honor, its
// default): a zone that has no spot node is no domain of a pod the split
// sent to spot. Only what a combination tells is judged (In, NotIn, Exists
// and DoesNotExist on its keys, and the selector's keys): a requirement on
// a key it does not list may still be met. c is returned as it is when it
// lists no combinations.
func ForPod(c Cluster, nodeSelector map[string]string, required *corev1.NodeSelector) Cluster {
	if c.Combinations == nil || (len(nodeSelector) == 0 && (required == nil || len(required.NodeSelectorTerms) == 0)) {
		return c
	}
	kept := make([]Combination, 0, len(c.Combinations))
	for _, comb := range c.Combinations {
		if mayMatch(comb.Values, nodeSelector, required) {
			kept = append(kept, comb)
		}
	}
	c.Combinations = kept
	return c
}

// mayMatch reports whether a node carrying values (of the keys they list)
// may match the selector and some term of required.
func mayMatch(values, nodeSelector map[string]string, required *corev1.NodeSelector) bool {
	for k, want := range nodeSelector {
		if v, ok := values[k]; ok && v != want {
			return false
		}
	}
	if required == nil || len(required.NodeSelectorTerms) == 0 {
		return true
	}
	return slices.ContainsFunc(required.NodeSelectorTerms, func(term corev1.NodeSelectorTerm) bool {
		return !slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return refutes(values, r)
		})
	})
}

// refutes reports whether values show a requirement unmet.
func refutes(values map[string]string, r corev1.NodeSelectorRequirement) bool {
	v, ok := values[r.Key]
	if !ok {
		return false
	}
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpDoesNotExist:
		return true
	}
	return false
}

// unmet says which requirement of a term no node of the cluster meets.
func unmet(c Cluster, term corev1.NodeSelectorTerm) string {
	for _, r := range term.MatchExpressions {
		if r.Operator != corev1.NodeSelectorOpIn {
			continue
		}
		have, ok := c.Topology[r.Key]
		if !ok || len(have) == 0 {
			continue
		}
		if !slices.ContainsFunc(r.Values, func(v string) bool { return slices.Contains(have, v) }) {
			sorted := slices.Clone(have)
			slices.Sort(sorted)
			return "no node with " + r.Key + " in [" + strings.Join(r.Values, ", ") + "] (its nodes have " + strings.Join(slices.Compact(sorted), ", ") + ")"
		}
	}
	return ""
}

// TooLarge says why no node of the cluster can hold a pod with these
// requests, as the largest free amounts of its summary tell: a request
// above the most of that resource any one node has free ("" when each fits,
// or the summary does not report it). A pod always needs room for one pod.
func TooLarge(c Cluster, requests corev1.ResourceList) string {
	if c.LargestFree == nil {
		return ""
	}
	names := make([]string, 0, len(requests)+1)
	for name := range requests {
		names = append(names, string(name))
	}
	if _, ok := requests[corev1.ResourcePods]; !ok {
		names = append(names, string(corev1.ResourcePods))
	}
	slices.Sort(names)
	for _, name := range names {
		want, ok := requests[corev1.ResourceName(name)]
		if !ok {
			want = resource.MustParse("1") // the pod itself
		}
		have, reported := c.LargestFree[corev1.ResourceName(name)]
		if !reported || want.Cmp(have) <= 0 {
			continue
		}
		return fmt.Sprintf("no node has %s %s free (the most on one node: %s)", want.String(), name, have.String())
	}
	return ""
}

// WithRoom keeps the clusters that may have room for a pod with these
// requests (see TooLarge), and says why it left out each other one. When
// none may, it keeps them all: summaries are a few seconds old, and a
// cluster whose nodes grow (an autoscaler) learns of a pod that needs a
// larger node only from its candidate.
func WithRoom(clusters []Cluster, requests corev1.ResourceList) (kept []Cluster, left map[string]string) {
	for _, c := range clusters {
		if why := TooLarge(c, requests); why != "" {
			if left == nil {
				left = map[string]string{}
			}
			left[c.Name] = why
			continue
		}
		kept = append(kept, c)
	}
	if len(kept) == 0 {
		return clusters, nil
	}
	return kept, left
}

// Room is how many pods with these requests the free totals of a cluster
// hold: the least, over the resources the pod requests and the pod count,
// of what is free ÷ what one pod asks. It is -1 when free tells nothing of
// any of them.
func Room(free, requests corev1.ResourceList) float64 {
	room := -1.0
	fits := func(have, want float64) {
		if n := have / want; room < 0 || n < room {
			room = max(n, 0)
		}
	}
	for name, want := range requests {
		have, ok := free[name]
		if !ok || name == corev1.ResourcePods || want.Sign() <= 0 {
			continue
		}
		fits(have.AsApproximateFloat64(), want.AsApproximateFloat64())
	}
	if have, ok := free[corev1.ResourcePods]; ok {
		fits(have.AsApproximateFloat64(), 1)
	}
	return room
}
