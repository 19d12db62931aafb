// Package split owns the on-demand/spot split of a workload's pods: of a
// workload's pods at most maxOnDemand get a required node affinity to
// on-demand nodes, the others to spot nodes. The decisions are pure
// functions of plain values (this file); the Assigner gives each new pod
// its place in the webhook, on every replica of the agent; the Rebalancer,
// on the leader, replaces one pod at a time when a workload's pods no
// longer match its maxOnDemand. The state of a split is only what its pods
// carry (CapacityTypeLabel, OnDemandSlotLabel), so it survives restarts.
package split

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Config is the split of one workload.
type Config struct {
	// MaxOnDemand is how many of the workload's pods run on on-demand nodes.
	MaxOnDemand int32
	// NodeLabel is the node label that tells the capacity type, with its
	// values for on-demand and for spot nodes.
	NodeLabel                  string
	OnDemandValues, SpotValues []string
	// From says where MaxOnDemand comes from, for Events and logs.
	From string
}

// DefaultConfig is the split of an annotated workload: the node label and
// values a PlacementPolicy defaults to.
func DefaultConfig(maxOnDemand int32, from string) Config {
	return Config{
		MaxOnDemand:    maxOnDemand,
		NodeLabel:      protocol.DefaultCapacityNodeLabel,
		OnDemandValues: []string{protocol.CapacityOnDemand},
		SpotValues:     []string{protocol.CapacitySpot},
		From:           from,
	}
}

// FromPolicy is the split a policy asks for. The API server defaults the
// node label and values; a policy that reaches us without them (a client
// that skipped defaulting) gets the same defaults.
func FromPolicy(p *v1alpha1.CapacityTypeSplit) Config {
	c := DefaultConfig(p.MaxOnDemand, "its PlacementPolicy")
	if p.NodeLabel != "" {
		c.NodeLabel = p.NodeLabel
	}
	if len(p.OnDemandValues) > 0 {
		c.OnDemandValues = labelValues(p.OnDemandValues)
	}
	if len(p.SpotValues) > 0 {
		c.SpotValues = labelValues(p.SpotValues)
	}
	return c
}

func labelValues(in []v1alpha1.LabelValue) []string {
	out := make([]string, len(in))
	for i, v := range in {
		out[i] = string(v)
	}
	return out
}

// ParseMaxOnDemand reads a max-on-demand annotation: a non-negative
// integer in decimal digits, no sign, no spaces, at most 2^31-1.
func ParseMaxOnDemand(v string) (int32, error) {
	bad := func() (int32, error) {
		return 0, fmt.Errorf("annotation %s is %q, not a non-negative integer", protocol.MaxOnDemandAnnotation, v)
	}
	if v == "" || len(v) > 10 {
		return bad()
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return bad()
		}
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return bad()
	}
	return int32(n), nil
}

// Resolve is a workload's split: the first of the pod's own annotation
// (from its template), its workload's annotation (kind names the
// workload), and its policy (nil: none). A bad annotation counts as absent
// (the pod is placed as if unannotated) and is returned as a problem, to
// be told to the workload's owner.
func Resolve(podAnnotations, workloadAnnotations map[string]string, kind string, policy *v1alpha1.CapacityTypeSplit) (cfg Config, ok bool, problems []error) {
	for _, a := range []struct {
		annotations map[string]string
		from        string
	}{{podAnnotations, "the pod template's annotation"}, {workloadAnnotations, "the " + kind + "'s annotation"}} {
		v, set := a.annotations[protocol.MaxOnDemandAnnotation]
		if !set {
			continue
		}
		n, err := ParseMaxOnDemand(v)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w; the pod is placed as if it were not there", a.from, err))
			continue
		}
		return DefaultConfig(n, a.from), true, problems
	}
	if policy != nil {
		return FromPolicy(policy), true, problems
	}
	return Config{}, false, problems
}

// OptedOut reports whether labels (a pod's or a pod template's) keep a
// workload out of the split.
func OptedOut(labels map[string]string) bool {
	return labels[protocol.CapacitySplitLabel] == "false"
}

// Place is where a pod runs: on an on-demand node in one of the workload's
// on-demand places (Slot, 0 to maxOnDemand-1; -1 when its label is
// unreadable), or on a spot node.
type Place struct {
	OnDemand bool
	Slot     int32
}

// Spot is the place of every pod beyond the on-demand ones.
var Spot = Place{Slot: -1}

// Type is the place's value of CapacityTypeLabel.
func (p Place) Type() string {
	if p.OnDemand {
		return protocol.CapacityOnDemand
	}
	return protocol.CapacitySpot
}

func (p Place) String() string {
	if p.OnDemand {
		return fmt.Sprintf("%s slot %d", protocol.CapacityOnDemand, p.Slot)
	}
	return protocol.CapacitySpot
}

// PlaceOf reads the place the split gave a pod from its labels; false when
// it gave none (the pod was admitted without the split).
func PlaceOf(labels map[string]string) (Place, bool) {
	switch labels[protocol.CapacityTypeLabel] {
	case protocol.CapacityOnDemand:
		slot := int32(-1)
		if n, err := ParseMaxOnDemand(labels[protocol.OnDemandSlotLabel]); err == nil {
			slot = n
		}
		return Place{OnDemand: true, Slot: slot}, true
	case protocol.CapacitySpot:
		return Spot, true
	}
	return Place{}, false
}

// Choose is the place of a new pod of a workload whose other pods hold the
// on-demand slots held (one entry per on-demand pod, and per place given
// out but not yet seen; an entry may repeat or lie beyond maxOnDemand):
// while fewer than maxOnDemand pods are on-demand, the lowest vacant slot,
// so a replacement takes the place of the pod it replaces; else spot.
func Choose(maxOnDemand int32, held []int32) Place {
	if int64(len(held)) >= int64(maxOnDemand) {
		return Spot
	}
	taken := make(map[int32]bool, len(held))
	for _, s := range held {
		taken[s] = true
	}
	// Fewer pods than places: one of the first len(held)+1 is vacant.
	for s := int32(0); s < maxOnDemand; s++ {
		if !taken[s] {
			return Place{OnDemand: true, Slot: s}
		}
	}
	return Spot
}

// The deletion costs of split pods: a ReplicaSet scaling down removes the
// pods of least cost first, so pods without a place (cost 0, admitted
// without the split), then spot pods, then on-demand pods from the highest
// slot down, which keeps the on-demand slots the lowest ones.
const (
	spotDeletionCost     = 1
	onDemandDeletionCost = 1_000_000
)

// DeletionCost is the pod-deletion-cost of a pod in place p.
func DeletionCost(p Place) int32 {
	if !p.OnDemand {
		return spotDeletionCost
	}
	return max(onDemandDeletionCost-max(p.Slot, 0), spotDeletionCost+1)
}

// Apply gives pod its place: a required node affinity to the place's node
// label values, ANDed into every required node selector term of the pod
// (terms are ORed: each must require it) after dropping the pod's own
// requirements on that label, which the split owns; the place's labels; and
// the deletion cost of the place, replacing one the pod's author set, as
// both cannot decide which pods a scale-down removes. It reports whether
// the pod changed; applied again it changes nothing.
func Apply(pod *corev1.Pod, cfg Config, p Place) bool {
	values := cfg.SpotValues
	if p.OnDemand {
		values = cfg.OnDemandValues
	}
	want := corev1.NodeSelectorRequirement{Key: cfg.NodeLabel, Operator: corev1.NodeSelectorOpIn, Values: slices.Clone(values)}
	changed := requireNodeLabel(pod, want)

	labels := map[string]string{protocol.CapacityTypeLabel: p.Type()}
	if p.OnDemand {
		labels[protocol.OnDemandSlotLabel] = strconv.Itoa(int(p.Slot))
	} else if _, ok := pod.Labels[protocol.OnDemandSlotLabel]; ok {
		delete(pod.Labels, protocol.OnDemandSlotLabel)
		changed = true
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	for k, v := range labels {
		if pod.Labels[k] != v {
			pod.Labels[k] = v
			changed = true
		}
	}
	cost := strconv.Itoa(int(DeletionCost(p)))
	if pod.Annotations[protocol.PodDeletionCostAnnotation] != cost {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[protocol.PodDeletionCostAnnotation] = cost
		changed = true
	}
	return changed
}

// requireNodeLabel puts want into every required node selector term of pod,
// in place of the terms' requirements on want's key.
func requireNodeLabel(pod *corev1.Pod, want corev1.NodeSelectorRequirement) bool {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	required := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(required.NodeSelectorTerms) == 0 {
		required.NodeSelectorTerms = []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{want}}}
		return true
	}
	changed := false
	for i := range required.NodeSelectorTerms {
		term := &required.NodeSelectorTerms[i]
		kept := make([]corev1.NodeSelectorRequirement, 0, len(term.MatchExpressions)+1)
		found := false
		for _, r := range term.MatchExpressions {
			if r.Key != want.Key {
				kept = append(kept, r)
				continue
			}
			if !found && r.Operator == want.Operator && slices.Equal(r.Values, want.Values) {
				found = true
				kept = append(kept, r)
				continue
			}
			changed = true // the author's, or a duplicate
		}
		if !found {
			kept = append(kept, want)
			changed = true
		}
		term.MatchExpressions = kept
	}
	return changed
}

// Member is what the split knows of one pod of a workload: all its caches
// keep of a pod.
type Member struct {
	Name string
	UID  types.UID
	// Place is the pod's place; Placed is false when the split gave it
	// none (admitted while the webhook was away, or before the workload
	// had a split).
	Place   Place
	Placed  bool
	Created time.Time
	// Terminating: the pod is being deleted.
	Terminating bool
	// ReadySince is when the pod last turned ready; zero when it is not.
	ReadySince time.Time
}

// Available reports whether the pod has been ready for minReady at now, as
// its controller counts available replicas.
func (m Member) Available(minReady time.Duration, now time.Time) bool {
	return !m.ReadySince.IsZero() && !now.Before(m.ReadySince.Add(minReady))
}

// Held is the on-demand slots that the pods hold, for Choose. A pod being
// deleted holds none: its controller has made, or is making, its
// replacement, which takes its place.
func Held(pods []Member) []int32 {
	var held []int32
	for _, m := range pods {
		if m.Placed && m.Place.OnDemand && !m.Terminating {
			held = append(held, m.Place.Slot)
		}
	}
	return held
}

// Count is how many of pods are on-demand, spot and without a place.
func Count(pods []Member) (onDemand, spot, unplaced int) {
	for _, m := range pods {
		switch {
		case !m.Placed:
			unplaced++
		case m.Place.OnDemand:
			onDemand++
		default:
			spot++
		}
	}
	return onDemand, spot, unplaced
}

// Rebalance picks the one pod to replace so that a workload's pods (none
// terminating) come closer to maxOnDemand on-demand, and says why; false
// when they match. In order: an on-demand pod beyond maxOnDemand (the
// highest slot, so the lowest stay); a pod without a place, whose node the
// split does not know (it may take an on-demand node uncounted), so its
// replacement gets one; a spot pod while on-demand places are vacant, so
// its replacement takes one. Among equals the youngest goes, having lost
// the least warm-up.
func Rebalance(maxOnDemand int32, pods []Member) (Member, string, bool) {
	onDemand, spot, unplaced := Count(pods)
	youngest := func(a, b Member) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	}
	pick := func(ok func(Member) bool, order func(a, b Member) int) Member {
		var candidates []Member
		for _, m := range pods {
			if ok(m) {
				candidates = append(candidates, m)
			}
		}
		slices.SortFunc(candidates, order)
		return candidates[0]
	}
	switch {
	case int64(onDemand) > int64(maxOnDemand):
		m := pick(func(m Member) bool { return m.Placed && m.Place.OnDemand }, func(a, b Member) int {
			// An unreadable slot (-1) counts as the highest.
			if c := cmp.Compare(slotRank(b.Place.Slot), slotRank(a.Place.Slot)); c != 0 {
				return c
			}
			return youngest(a, b)
		})
		return m, fmt.Sprintf("%d pods are on on-demand nodes, more than the %d allowed", onDemand, maxOnDemand), true
	case unplaced > 0:
		m := pick(func(m Member) bool { return !m.Placed }, youngest)
		return m, fmt.Sprintf("%d pods were admitted without a place on on-demand or spot nodes", unplaced), true
	case int64(onDemand) < int64(maxOnDemand) && spot > 0:
		m := pick(func(m Member) bool { return m.Placed && !m.Place.OnDemand }, youngest)
		return m, fmt.Sprintf("%d pods are on on-demand nodes, fewer than the %d allowed, while %d are on spot nodes", onDemand, maxOnDemand, spot), true
	}
	return Member{}, "", false
}

func slotRank(s int32) int64 {
	if s < 0 {
		return math.MaxInt64
	}
	return int64(s)
}

// Status is what a workload reports of its replicas.
type Status struct {
	// Replicas is the desired count (spec.replicas).
	Replicas int32
	// Generation and ObservedGeneration: the status describes the spec
	// when they are equal.
	Generation, ObservedGeneration int64
	// Current, Updated, Ready, Available are the status's counts.
	Current, Updated, Ready, Available int32
}

// Settled reports whether a pod of the workload may be replaced now without
// taking it below its availability: its controller has seen its spec and
// every replica is up to date, ready and available (ready for minReady at
// now), by its status and by its pods as the cache sees them (a status can
// lag a pod just deleted); no pod is being deleted. Otherwise it says what
// is waited for.
func Settled(s Status, pods []Member, minReady time.Duration, now time.Time) (bool, string) {
	switch {
	case s.ObservedGeneration < s.Generation:
		return false, "its controller has not seen its latest spec"
	case s.Current != s.Replicas || s.Updated != s.Replicas || s.Ready != s.Replicas || s.Available != s.Replicas:
		return false, fmt.Sprintf("its status counts %d replicas, %d updated, %d ready, %d available of %d", s.Current, s.Updated, s.Ready, s.Available, s.Replicas)
	case int64(len(pods)) != int64(s.Replicas):
		return false, fmt.Sprintf("it has %d pods for %d replicas", len(pods), s.Replicas)
	}
	for _, m := range pods {
		if m.Terminating {
			return false, fmt.Sprintf("pod %s is being deleted", m.Name)
		}
		if !m.Available(minReady, now) {
			return false, fmt.Sprintf("pod %s is not available", m.Name)
		}
	}
	return true, ""
}
