package reservation

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/gang"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/placementpolicy"
	"github.com/flotilla-dev/flotilla/pkg/policy"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

// workloadOf is the index value of a source pod's workload (see
// workload.PodIndex), "" for a pod of no workload.
func workloadOf(pod *corev1.Pod) string {
	if k, ok := workload.Of(pod); ok {
		return k.String()
	}
	return ""
}

// plan is what a placement policy means for one source pod in one
// reconcile. The zero plan (no policy) changes nothing.
type plan struct {
	policy *policy.Compiled
	// clusters are the invited targets as placement sees them.
	clusters map[string]placement.Cluster
	// selected are the targets the policy lets the pod go to, the
	// fallback groups widened as far as the earlier ones failed.
	selected []*target.Target
	// excluded says, per target, why the policy keeps the pod from it.
	excluded map[string]string
	// known are the domains the selected targets offer.
	known []placement.Domain
	// pins is, per target spanning several domains, the domain a new
	// candidate there is pinned to.
	pins map[string]placement.Domain
	// closed is, per target spanning several domains, the keys of its
	// domains a DoNotSchedule spread excludes now: a candidate pinned to
	// one of them can never be elected.
	closed map[string]map[string]bool
	// leftOut says, per target that holds a candidate the policy does not
	// send there now, why it may not be elected.
	leftOut map[string]string
	// needs are what the pod asks of the node it runs on, from the spec
	// its candidates run: its requests weigh a target's room, and the
	// targets' domains a spread counts are those its node selector and
	// required node affinity may match.
	needs placementpolicy.Needs
	// plan is the policy's pure plan (placementpolicy.Select, then
	// Spread), which explain makes too.
	plan placementpolicy.Plan
	// full are, per target, the keys of the domains where the pod's
	// candidate found no node lately (memory.fullFor).
	full map[string]map[string]bool
	// places are the targets as the spread counts pods in them, worked
	// out once a plan (placeOf): a spread counts every sibling.
	places map[string]placementpolicy.Place
	// seen is what the round read of the targets, each once; nil outside
	// a round.
	seen *seenTargets
	// look is when to look at the pod again for its fallback groups: the
	// candidates of the earlier ones may be overdue, or their overdue
	// marks confirmed, by then (0: no need).
	look time.Duration
}

// leftOut returns the candidates of the pod in invited targets that did
// not get one in this fan-out, as placements to observe. Under a policy,
// the plan records why each may not be elected. They are not deleted: in
// a burst the spread's verdicts change with every sibling elected, and
// deleting and sending candidates again as they flip costs far more (tens
// of writes per pod in the benchmark) than the node they hold until their
// Permit times out.
func (c *Controller) leftOut(pod *corev1.Pod, invited, eligible []*target.Target, p *plan) []candidate.Placement {
	in := make(map[string]bool, len(eligible))
	for _, t := range eligible {
		in[t.Name] = true
	}
	var out []candidate.Placement
	for _, t := range invited {
		if in[t.Name] {
			continue
		}
		cand, ok := candidate.Of(t, pod, c.SourceCluster)
		if !ok {
			continue
		}
		out = append(out, candidate.Placement{Target: t, Candidate: cand})
		if p.policy != nil {
			why := p.excluded[t.Name]
			if strings.HasPrefix(why, placementpolicy.SpreadExclusion) {
				// The spread's verdict came from the count before the
				// workload's lock; the election judges the reservation
				// again on the count under it.
				continue
			}
			if p.leftOut == nil {
				p.leftOut = map[string]string{}
			}
			if why == "" {
				why = "not selected by the placement policy now"
			}
			p.leftOut[t.Name] = why
		}
	}
	return out
}

// leaveOutForGang marks the candidates in targets the pod's gang did not
// choose as left out: never elected, and no place of the gang. The target
// of the pod's standing election is kept: its candidate there is its
// place.
func (p *plan) leaveOutForGang(placements []candidate.Placement, election protocol.Election, choice *gang.Choice) {
	for _, pl := range placements {
		name := pl.Target.Name
		if choice.Has(name) || (election.Elected() && election.Target == name) {
			continue
		}
		if _, ok := p.leftOut[name]; ok {
			continue
		}
		if p.leftOut == nil {
			p.leftOut = map[string]string{}
		}
		p.leftOut[name] = "not among the targets chosen for its gang"
	}
}

// planFor resolves the policy of a source pod and selects its targets.
// problem is set when a policy meant to govern the pod does not (its owner
// is told; the pod is placed as if no policy selected it).
func (c *Controller) planFor(ctx context.Context, pod *corev1.Pod, invited []*target.Target, seen *seenTargets) (p plan, problem string, err error) {
	p.seen = seen
	// Targets that cannot run the pod, or take no new pod now, are left
	// out before any policy groups or counts them.
	p.needs = placementpolicy.NeedsOf(pod)
	clusters := make([]placement.Cluster, len(invited))
	standing := make([]placementpolicy.Standing, len(invited))
	now := c.now()
	for i, t := range invited {
		clusters[i] = seen.summaryOf(t).cluster
		standing[i] = placementpolicy.Standing{Cluster: clusters[i], HeldBack: t.HeldBack(now), Taints: t.NodeTaints()}
	}
	p.excluded = placementpolicy.Prefilter(standing, p.needs)
	kept, keptClusters := invited[:0:0], clusters[:0:0]
	for i, t := range invited {
		if _, out := p.excluded[t.Name]; !out {
			kept, keptClusters = append(kept, t), append(keptClusters, clusters[i])
		}
	}
	invited, clusters = kept, keptClusters
	p.selected = invited
	if c.Policies == nil {
		return p, "", nil
	}
	res, err := c.Policies.For(ctx, pod)
	if err != nil {
		return p, "", err
	}
	if res.Policy == nil {
		return p, res.Problem, nil
	}
	compiled, err := policy.Compile(res.Policy)
	if err != nil {
		return p, fmt.Sprintf("PlacementPolicy %s is not used: %v", res.Policy.Name, err), nil
	}
	p.policy = compiled
	p.clusters = make(map[string]placement.Cluster, len(invited))
	var heard func(*target.Target) candidate.Prospect
	if len(compiled.Selector.Groups) > 1 {
		// A later fallback group is used once every target of the
		// earlier ones failed the pod or holds its candidate overdue: a
		// target whose scheduler is down never answers it.
		heard = func(t *target.Target) candidate.Prospect { return candidate.Heard(t.Outcomes()) }
	}
	views := seen.views(invited, heard)
	if heard != nil {
		p.look = c.confirmOverdue(pod.UID, fallbackClock, views)
	}
	targets := make([]placementpolicy.Target, len(invited))
	for i, t := range invited {
		cl := clusters[i]
		if t.Self && cl.Topology == nil && compiled.Spreads() && c.SelfTopology != nil {
			// A self target publishes no summary: its nodes are this
			// cluster's.
			if values, combinations, ok := c.SelfTopology(compiled.Keys()); ok {
				cl.Topology, cl.Combinations = values, combinations
			}
		}
		p.clusters[t.Name] = cl
		// The spread counts the domains of the nodes the pod may use; a
		// sibling's domain (placeOf) is read from the whole target.
		targets[i] = placementpolicy.Target{Cluster: placement.ForPod(cl, p.needs.NodeSelector, p.needs.Required), Failed: views[i].Failed || views[i].Overdue}
	}
	p.plan = placementpolicy.Select(compiled, targets)
	p.adopt(invited)
	if heard != nil && p.plan.HeldBack > 0 {
		p.look = soonest(p.look, lookForOverdue(p.selected, views, invited, heard))
	}
	return p, "", nil
}

// lookForOverdue is when to look again at a pod whose selected targets
// have each failed it or wait to answer it (candidate.WidensWhenOverdue),
// for the waiting ones may then be overdue: nothing else wakes a pod whose
// candidates wait in targets that never answer. It is 0 when some selected
// target may still place the pod on its own (no candidate there yet, or a
// reservation).
func lookForOverdue(selected []*target.Target, views []candidate.View, invited []*target.Target, heard func(*target.Target) candidate.Prospect) time.Duration {
	of := make(map[*target.Target]candidate.View, len(invited))
	for i, t := range invited {
		of[t] = views[i]
	}
	mine := make([]candidate.View, len(selected))
	for i, t := range selected {
		mine[i] = of[t]
	}
	if !candidate.WidensWhenOverdue(mine) {
		return 0
	}
	var look time.Duration
	for i, t := range selected {
		if mine[i].Waiting {
			look = soonest(look, heard(t).OverdueAfter())
		}
	}
	return look
}

// adopt takes the pure plan's selection and exclusions into the plan,
// among targets.
func (p *plan) adopt(targets []*target.Target) {
	if p.excluded == nil {
		p.excluded = map[string]string{}
	}
	for name, why := range p.plan.Excluded {
		p.excluded[name] = why
	}
	byName := make(map[string]*target.Target, len(targets))
	for _, t := range targets {
		byName[t.Name] = t
	}
	p.selected = p.selected[:0:0]
	for _, name := range p.plan.Selected {
		p.selected = append(p.selected, byName[name])
	}
	p.known = p.plan.Known
}

// prospects weighs the selected targets for the pod's first candidates
// (candidate.Eligible): their room for the pod, as their summaries tell,
// how they answered this agent's candidates, and the policy's preference;
// and says of each whether one candidate there is likely enough
// (candidate.ToFanOut). It is nil, all alike, when every target gets a
// candidate, or there is only one.
func (c *Controller) prospects(p *plan) func(*target.Target) candidate.Prospect {
	if c.MaxCandidates <= 0 || len(p.selected) <= 1 {
		return nil
	}
	return c.weighOnce(p)
}

// weighOnce is the prospect of each of the plan's selected targets,
// weighed once per fan-out, on the first call.
func (c *Controller) weighOnce(p *plan) func(*target.Target) candidate.Prospect {
	var ps map[string]candidate.Prospect
	return func(t *target.Target) candidate.Prospect {
		if ps == nil {
			ps = p.weigh(c.SelfFree)
		}
		return ps[t.Name]
	}
}

// sureOf is what a pre-election judges the plan's targets by: the fan-out's
// prospects, or with a single target selected (which the fan-out does
// not weigh: it gets the pod's candidate whatever its prospect) that
// target's, so that a fleet of one target, or a cluster that targets only
// itself, pre-elects too.
func (c *Controller) sureOf(p *plan, prospects func(*target.Target) candidate.Prospect) func(*target.Target) candidate.Prospect {
	if prospects != nil || len(p.selected) != 1 {
		return prospects
	}
	return c.weighOnce(p)
}

// room is how many pods like the plan's each selected target's free room
// holds: a target's from its ClusterSummary, a self target's from selfFree
// (nil: unknown); negative when unknown.
func (p *plan) room(selfFree func() (corev1.ResourceList, bool)) map[string]float64 {
	room := make(map[string]float64, len(p.selected))
	for _, t := range p.selected {
		room[t.Name] = -1
		if s := p.seen.summaryOf(t).summary; s != nil && s.Free != nil {
			room[t.Name] = placement.Room(s.Free, p.needs.Requests)
		} else if t.Self && selfFree != nil {
			if free, ok := selfFree(); ok {
				room[t.Name] = placement.Room(free, p.needs.Requests)
			}
		}
	}
	return room
}

// weigh is the prospect of each selected target (see prospects), its room
// as room gives it.
func (p *plan) weigh(selfFree func() (corev1.ResourceList, bool)) map[string]candidate.Prospect {
	ps := make(map[string]candidate.Prospect, len(p.selected))
	room := p.room(selfFree)
	for _, t := range p.selected {
		o := t.Outcomes()
		pr := candidate.Heard(o)
		pr.Room = room[t.Name]
		pr.Sure = candidate.SureOf(pr.Room, o.Waiting, o.Ended, o.Answer, o.Misses)
		if p.policy != nil {
			if cl, ok := p.clusters[t.Name]; ok {
				pr.Preference = placement.PreferenceScore(p.policy.Selector, cl)
			}
		}
		ps[t.Name] = pr
	}
	candidate.FillRoom(ps)
	return ps
}

// siblingDomains are the domains where the pod's workload siblings are:
// bound, or elected and not yet bound (including elections this process
// wrote that the cache does not show yet), counted as
// placementpolicy.Counts and Tally count them.
func (c *Controller) siblingDomains(ctx context.Context, pod *corev1.Pod, p *plan) ([]placement.Domain, error) {
	key := workloadOf(pod)
	if key == "" {
		return nil, nil
	}
	siblings, err := workload.Siblings(c.SourcePods, pod.Namespace, key)
	if err != nil {
		return nil, fmt.Errorf("listing the siblings of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	var placed []placementpolicy.Sibling
	for _, s := range siblings {
		if !placementpolicy.Counts(pod, s) {
			continue
		}
		t, reported := c.placedIn(s)
		if t == nil {
			continue
		}
		p.placeOf(t) // Tally finds it in p.places
		placed = append(placed, placementpolicy.Sibling{Target: t.Name, Reported: reported, Pinned: c.pinnedUnreported(t, s, reported)})
	}
	out, _ := placementpolicy.Tally(placed, p.places)
	return out, nil
}

// pinnedUnreported is the domain a source pod's candidate in t was pinned
// to, when its target reported no node (reported is nil): the domain it
// counts in if t spans several.
func (c *Controller) pinnedUnreported(t *target.Target, source *corev1.Pod, reported map[string]string) []string {
	if reported != nil {
		return nil
	}
	cand, ok := candidate.Of(t, source, c.SourceCluster)
	if !ok {
		return nil
	}
	return candidate.PinnedDomain(cand)
}

// electionOf is the election of a source pod and its elected domain, raw,
// and the copy of the pod they were read with: the ones this process last
// wrote while the pod is unbound and its cache may not show them yet
// (memory.electionWritten), else the annotations of the cache's newest copy of the
// pod. A written election is forgotten once the cache shows it, so its
// memory is read before the newest copy: one of the two has it, where a
// copy the caller read earlier may predate both.
func (c *Controller) electionOf(p *corev1.Pod) (current *corev1.Pod, election, domain string) {
	w, wrote := c.memory.electionWritten(p.UID)
	p = c.newest(p)
	if wrote && p.Spec.NodeName == "" {
		return p, w.value, w.domain
	}
	return p, p.Annotations[protocol.ElectionAnnotation], p.Annotations[protocol.ElectedDomainAnnotation]
}

// newest is the cache's newest copy of pod (pod itself when the cache has
// none of its UID).
func (c *Controller) newest(pod *corev1.Pod) *corev1.Pod {
	if c.SourcePods == nil {
		return pod
	}
	obj, ok, err := c.SourcePods.GetByKey(pod.Namespace + "/" + pod.Name)
	if p, isPod := obj.(*corev1.Pod); err == nil && ok && isPod && p.UID == pod.UID {
		return p
	}
	return pod
}

// placedIn is the target a sibling is bound to or elected in, nil if none,
// and the domain of its node as the target reported it at the election
// (nil when not recorded).
func (c *Controller) placedIn(s *corev1.Pod) (*target.Target, map[string]string) {
	s, raw, rawDomain := c.electionOf(s)
	domain := placementpolicy.ReportedDomain(rawDomain)
	if s.Spec.NodeName != "" {
		t, _ := c.Targets.OfPod(s)
		return t, domain
	}
	e, err := protocol.ParseElection(raw)
	if err != nil || !e.Elected() {
		return nil, nil
	}
	t, _ := c.Targets.Get(e.Target)
	return t, domain
}

// clusterOf is the plan's view of an invited target, or the one the round
// read.
func (p *plan) clusterOf(t *target.Target) placement.Cluster {
	if cl, ok := p.clusters[t.Name]; ok {
		return cl
	}
	return p.seen.summaryOf(t).cluster
}

// placeOf is t as the policy's spread counts pods in it, worked out once a
// plan from the plan's view of it.
func (p *plan) placeOf(t *target.Target) placementpolicy.Place {
	if pl, ok := p.places[t.Name]; ok {
		return pl
	}
	pl := placementpolicy.PlaceOf(p.clusterOf(t), t.Labels, p.seen.summaryOf(t).summary, p.policy.Keys())
	if p.places == nil {
		p.places = map[string]placementpolicy.Place{}
	}
	p.places[t.Name] = pl
	return pl
}

// prepareFanOut drops the targets where no domain is allowed by a
// DoNotSchedule constraint (no candidate where none may be elected), and
// picks the domain to pin a candidate to in targets spanning several.
func (c *Controller) prepareFanOut(p *plan, placed []placement.Domain) {
	if !p.policy.Spreads() {
		return
	}
	selected := p.selected
	p.plan.Spread(p.policy, placed, p.full)
	p.adopt(selected)
	p.pins, p.closed = p.plan.Pins, p.plan.Closed
}

// stalePins are the pod's candidates pinned to a domain the spread has
// closed since, in a target with another domain open (where a new
// candidate would be pinned): such a candidate can never be elected, and
// its target would reserve it in that domain again and again. The one in
// the elected target is left alone.
func (p *plan) stalePins(placements []candidate.Placement, elected string) []candidate.Placement {
	var out []candidate.Placement
	for _, pl := range placements {
		cand, name := pl.Candidate, pl.Target.Name
		if cand == nil || cand.DeletionTimestamp != nil || cand.Spec.NodeName != "" || name == elected {
			continue
		}
		if _, open := p.pins[name]; !open {
			continue
		}
		if pinned := candidate.PinnedDomain(cand); pinned != nil && p.closed[name][placement.Domain(pinned).Key()] {
			out = append(out, pl)
		}
	}
	return out
}

// narrowedBySpread reports whether the spread kept the pod from a target
// it could otherwise go to.
func (p *plan) narrowedBySpread() bool {
	for _, why := range p.excluded {
		if strings.HasPrefix(why, placementpolicy.SpreadExclusion) {
			return true
		}
	}
	return false
}

// shaper pins new candidates to the domain counted for their target.
func (p *plan) shaper() candidate.Shaper {
	if len(p.pins) == 0 {
		return nil
	}
	keys := p.policy.Keys()
	hard := make([]bool, len(p.policy.Constraints))
	for i, c := range p.policy.Constraints {
		hard[i] = c.WhenUnsatisfiable == placement.DoNotSchedule
	}
	return func(t *target.Target, cand *corev1.Pod) {
		if d, ok := p.pins[t.Name]; ok {
			candidate.Pin(cand, keys, d, hard)
		}
	}
}

// judgement is what the pod's policy weighs its reservations with (nil
// without a policy), placed being its siblings' domains as last counted.
// It fills in the domain each reservation in observed counts in.
func (c *Controller) judgement(pod *corev1.Pod, p *plan, placed []placement.Domain, observed []Observed) *Judgement {
	if p.policy == nil {
		return nil
	}
	j := &Judgement{Preference: map[string]int64{}, Known: p.known, Placed: placed}
	for _, o := range observed {
		if cl, ok := p.clusters[o.Target]; ok {
			j.Preference[o.Target] = placement.PreferenceScore(p.policy.Selector, cl)
		}
	}
	if w := p.policy.Window; w != nil {
		j.Window = &Window{Candidates: w.Candidates, Timeout: w.Timeout}
		if anyReserved(observed) {
			j.Window.FirstReserved = c.memory.reservedSince(pod.UID, c.now())
		}
	}
	if !p.policy.Spreads() {
		return j
	}
	j.Constraints, j.Weight = p.policy.Constraints, p.policy.Weight
	keys := p.policy.Keys()
	if d, ok := c.rememberedDomain(pod, p, keys); ok {
		j.Known = append(slices.Clip(j.Known), d)
	}
	for i, o := range observed {
		if !o.Exists || o.State.Phase != protocol.PhaseReserved {
			continue
		}
		t, ok := c.Targets.Get(o.Target)
		if !ok {
			continue
		}
		reported := o.State.Domain()
		if d, ok := p.placeOf(t).Domain(reported, c.pinnedUnreported(t, pod, reported)); ok {
			observed[i].Domain = d
		}
	}
	return j
}

// rememberedDomain is the domain of the pod's last election, when it was
// elected lately in a target whose domains are known only from what its
// scheduler reports (no labels, no summary): once that reservation is
// released, the report may be the only sign the domain exists, and a
// re-election must still count it, empty as it may be. A target whose
// domains are known needs none: a domain it no longer offers (its nodes
// gone) must not count, as kube-scheduler counts no zone without nodes.
func (c *Controller) rememberedDomain(pod *corev1.Pod, p *plan, keys []string) (placement.Domain, bool) {
	e, ok := c.memory.lastElectedDomain(pod.UID)
	if !ok {
		return nil, false
	}
	t, ok := c.Targets.Get(e.target)
	if !ok || c.now().Sub(e.at) > rememberDomainFor {
		return nil, false
	}
	if placementpolicy.DomainsKnown(p.clusterOf(t), keys) {
		return nil, false
	}
	return p.placeOf(t).NodeDomain(e.domain), true
}

// rememberDomainFor bounds how long a released election's domain counts:
// long enough for the re-elections that follow a Permit timeout, short
// enough that a domain gone meanwhile holds no pod back for long.
const rememberDomainFor = 5 * time.Minute

// exclusions describes the targets the policy keeps the pod from.
func (p *plan) exclusions() string {
	if len(p.excluded) == 0 {
		return ""
	}
	names := make([]string, 0, len(p.excluded))
	for n := range p.excluded {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + " (" + p.excluded[n] + ")"
	}
	if p.policy == nil {
		return "excluded " + strings.Join(parts, ", ")
	}
	return fmt.Sprintf("PlacementPolicy %s excluded %s", p.policy.Name, strings.Join(parts, ", "))
}

// workloadLocks serialises the elections of one workload's pods, so that
// concurrent siblings each see the others' choices.
type workloadLocks struct {
	mu    sync.Mutex
	locks map[string]*workloadLock
}

type workloadLock struct {
	sync.Mutex
	users int
}

// lock takes the lock of key and returns its release.
func (w *workloadLocks) lock(key string) func() {
	w.mu.Lock()
	if w.locks == nil {
		w.locks = map[string]*workloadLock{}
	}
	l := w.locks[key]
	if l == nil {
		l = &workloadLock{}
		w.locks[key] = l
	}
	l.users++
	w.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		w.mu.Lock()
		if l.users--; l.users == 0 {
			delete(w.locks, key)
		}
		w.mu.Unlock()
	}
}
