package reservation

import (
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/placementpolicy"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// sight and readSummary are where a round reads a target's cache: what it
// holds of the pod and answered, and its ClusterSummary. Tests count the
// reads through them.
var (
	sight       = candidate.Sight
	readSummary = (*target.Target).Summary
)

// seenTargets is what one round reads of the targets, each once: what each
// target serving the pod's namespace holds of the pod and answered
// (candidate.Sight), read as the round starts, and a target's
// ClusterSummary with the target as placement sees it (ClusterOf), read
// the first time the round asks. Every decision of the round then judges
// the same picture of a target, however many subsets of the targets it
// weighs, and a round of many targets reads no cache twice. A plan made
// outside a round has none: it reads a summary afresh at every ask.
type seenTargets struct {
	pod           *corev1.Pod
	sourceCluster string
	sightings     []candidate.Sighting
	summaries     map[*target.Target]seenSummary
}

// seenSummary is a target's ClusterSummary (nil: it publishes none) and
// the target as placement sees it from it.
type seenSummary struct {
	summary *v1alpha1.ClusterSummaryStatus
	cluster placement.Cluster
}

// seeTargets reads what the targets hold of the pod and answered.
func seeTargets(pod *corev1.Pod, sourceCluster string, targets []*target.Target) *seenTargets {
	return &seenTargets{pod: pod, sourceCluster: sourceCluster, sightings: sight(pod, sourceCluster, targets)}
}

// views are the views of targets, in their order, weighed by prospect
// (nil: all alike), from what the round read of them.
func (s *seenTargets) views(targets []*target.Target, prospect func(*target.Target) candidate.Prospect) []candidate.View {
	at := make(map[*target.Target]int, len(s.sightings))
	for i, sg := range s.sightings {
		at[sg.Target] = i
	}
	picked := make([]candidate.Sighting, len(targets))
	for i, t := range targets {
		j, ok := at[t]
		if !ok {
			// Not among the targets the round began with: read now, once.
			s.sightings = append(s.sightings, sight(s.pod, s.sourceCluster, []*target.Target{t})...)
			j = len(s.sightings) - 1
			at[t] = j
		}
		picked[i] = s.sightings[j]
	}
	return candidate.Weighed(picked, prospect)
}

// summaryOf is t's ClusterSummary and t as placement sees it, read the
// first time the round asks.
func (s *seenTargets) summaryOf(t *target.Target) seenSummary {
	if s == nil {
		return summaryFrom(t, readSummary(t))
	}
	if seen, ok := s.summaries[t]; ok {
		return seen
	}
	seen := summaryFrom(t, readSummary(t))
	if s.summaries == nil {
		s.summaries = map[*target.Target]seenSummary{}
	}
	s.summaries[t] = seen
	return seen
}

// ClusterOf is a target as placement sees it: its virtual node's labels
// (those common to all its nodes, then its own), and what its summary
// tells (placementpolicy.ClusterOf).
func ClusterOf(t *target.Target) placement.Cluster {
	return summaryFrom(t, readSummary(t)).cluster
}

// summaryFrom is t as placement sees it from its summary s. Every round
// asks it of every target, and a target's summary changes once per
// publishing interval at most: what was made from a summary is remembered
// by the summary (each target holds a copy of its own; callers only read
// what is made), up to maxSeenSummaries of them. A target that publishes
// none is made afresh (its labels only: cheap).
func summaryFrom(t *target.Target, s *v1alpha1.ClusterSummaryStatus) seenSummary {
	if s == nil {
		return makeSeenSummary(t, s)
	}
	key := seenSummaryKey{t.Name, s}
	seenSummaries.Lock()
	defer seenSummaries.Unlock()
	if seen, ok := seenSummaries.m[key]; ok {
		return seen
	}
	seen := makeSeenSummary(t, s)
	if len(seenSummaries.m) >= maxSeenSummaries {
		clear(seenSummaries.m)
	}
	seenSummaries.m[key] = seen
	return seen
}

// maxSeenSummaries bounds summaryFrom's memory: targets publish a new
// summary every few seconds.
const maxSeenSummaries = 256

// seenSummaryKey is a target's name and its summary: a target's summary
// is its own copy, kept alive by the key, so no other target's or later
// summary has its address.
type seenSummaryKey struct {
	target  string
	summary *v1alpha1.ClusterSummaryStatus
}

var seenSummaries = struct {
	sync.Mutex
	m map[seenSummaryKey]seenSummary
}{m: map[seenSummaryKey]seenSummary{}}

func makeSeenSummary(t *target.Target, s *v1alpha1.ClusterSummaryStatus) seenSummary {
	labels := map[string]string{}
	if s != nil {
		maps.Copy(labels, target.NodeLabels(s))
	}
	maps.Copy(labels, t.Labels)
	return seenSummary{summary: s, cluster: placementpolicy.ClusterOf(t.Name, labels, s)}
}
