package scenario

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/chaos"
)

// Kinds of violation of this package; the protocol's own (two-bound,
// bound-again, bound-without-election, orphan, stray, stuck, lost) are
// test/chaos's.
const (
	// Skew: a delegate bound where its workload's DoNotSchedule spread
	// then exceeds maxSkew (invariant 8), counted on the real nodes.
	Skew chaos.Kind = "skew"
	// NoDomain: a delegate of a DoNotSchedule spread bound on a node that
	// lacks one of the spread's keys, where kube-scheduler never puts it.
	NoDomain chaos.Kind = "no-domain"
	// UnderPlaced: after settling, Flotilla runs fewer pods of a workload
	// than kube-scheduler, less the slack.
	UnderPlaced chaos.Kind = "under-placed"
	// OpenElection: after settling, a pending source pod whose election
	// names a target that holds no candidate of it.
	OpenElection chaos.Kind = "open-election"
)

// AllKinds lists every kind the scenario reports, in print order.
var AllKinds = append(append([]chaos.Kind(nil), chaos.Kinds...), Skew, NoDomain, UnderPlaced, OpenElection)

// NodeRef names a real node of a cluster.
type NodeRef struct{ Cluster, Name string }

// FleetNode is what the checker knows of a real node: its labels and what
// it can ever hold.
type FleetNode struct {
	Labels      map[string]string
	Allocatable corev1.ResourceList
}

// Placement is one observed state of a candidate, as the spread counts it.
type Placement struct {
	Cluster, UID string
	SourceUID    string
	App          string
	// Node it is bound to, or, for an elected candidate whose target
	// reports a reservation, the node it holds.
	Node  string
	Bound bool
	// Target is the candidate's target label; Nonce is its target's last
	// report's, and Reserved the node a Reserved report names, allowed or
	// not: the source's election of that nonce counts it there
	// (ObserveElection).
	Target, Reserved, Nonce string
	// Required is the candidate's required node affinity; Requests what it
	// asks of a node.
	Required    *corev1.NodeSelector
	Requests    corev1.ResourceList
	Terminating bool
}

// PlacementOf reads a candidate pod of cluster, if it is one.
func PlacementOf(cluster string, p *corev1.Pod) (Placement, bool) {
	if p.Labels[protocol.CandidateLabel] != "true" {
		return Placement{}, false
	}
	pl := Placement{
		Cluster: cluster, UID: string(p.UID), SourceUID: p.Labels[protocol.SourceUIDLabel],
		App: AppOf(p), Node: p.Spec.NodeName, Bound: p.Spec.NodeName != "", Terminating: p.DeletionTimestamp != nil,
	}
	pl.Target = p.Labels[protocol.TargetLabel]
	var st protocol.State
	if err := decodeState(p.Annotations[protocol.StateAnnotation], &st); err == nil {
		pl.Nonce = st.Nonce
		if !pl.Bound && st.Phase == protocol.PhaseReserved {
			pl.Reserved = st.Node
			if p.Annotations[protocol.AllowedAnnotation] != "" {
				pl.Node = st.Node
			}
		}
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		pl.Required = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	pl.Requests = corev1.ResourceList{}
	for _, c := range p.Spec.Containers {
		for k, v := range c.Resources.Requests {
			q := pl.Requests[k]
			q.Add(v)
			pl.Requests[k] = q
		}
	}
	return pl, true
}

// AppOf is the workload of a source pod or a candidate: its app label, or
// the label a candidate carries it under, or the candidate's record of its
// source's labels.
func AppOf(p *corev1.Pod) string {
	if v := p.Labels[AppLabel]; v != "" {
		return v
	}
	if key, ok := protocol.CarriedLabelKey(AppLabel); ok {
		if v := p.Labels[key]; v != "" {
			return v
		}
	}
	if raw := p.Annotations[protocol.SourceLabelsAnnotation]; raw != "" {
		var src map[string]string
		if err := decodeJSON(raw, &src); err == nil {
			return src[AppLabel]
		}
	}
	return ""
}

// SpreadChecker judges every election of a source pod against its
// workload's DoNotSchedule spread, as kube-scheduler's filter judges a pod
// when it schedules it, counting the pods it has assumed: with it, the
// elected node's domain may hold at most maxSkew more of the workload's
// pods than the emptiest domain the pod could run in (empty and full
// domains included). An election is judged once the checker has seen the
// reservation it names and the reservations of the siblings' elections, so
// that a watch of one cluster lagging another's does not count a sibling
// nowhere. A sibling whose election is withdrawn later (its target never
// bound it) leaves the elections made before as they were judged: a
// binding is not judged again, since no scheduler can foresee a
// withdrawal. Levels are judged as Flotilla's joint spread is
// defined: regions against all regions, a zone against the zones of its
// region. A pod counts in the domain of the real node that runs it, or of
// the node its elected candidate holds (bound, or reserved under the
// election its source records, as the agent must count it); terminating
// pods do not count. It is safe for concurrent use.
type SpreadChecker struct {
	mu       sync.Mutex
	nodes    map[NodeRef]FleetNode
	live     map[string]bool
	policies map[string]Policy
	current  map[string]Placement // by cluster/uid
	// elections are the source pods' elections, by source UID.
	elections map[string]seenElection
	// judged are the elections judged, by source UID, generation, target
	// and nonce.
	judged   map[string]bool
	sticky   []chaos.Violation
	reported map[string]bool
	// judgedCount counts the elections judged.
	judgedCount int
	// seq numbers the elections in the order seen.
	seq uint64
}

// NewSpreadChecker judges the DoNotSchedule policies of policies (by
// workload) over nodes; every cluster is live at first.
func NewSpreadChecker(nodes map[NodeRef]FleetNode, policies map[string]Policy) *SpreadChecker {
	live := map[string]bool{}
	for ref := range nodes {
		live[ref.Cluster] = true
	}
	return &SpreadChecker{nodes: nodes, live: live, policies: policies,
		current: map[string]Placement{}, judged: map[string]bool{}, reported: map[string]bool{},
		elections: map[string]seenElection{}}
}

// SetLive says which clusters a live target still reaches: the others'
// domains no longer count.
func (sc *SpreadChecker) SetLive(clusters map[string]bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.live = clusters
}

// ObserveElection feeds one observed election of a source pod (its
// annotation as written): from the moment it names a reservation, the pod
// counts in that reservation's node, as the source counts it when it
// elects the pod's siblings, before the allowance reaches the candidate.
func (sc *SpreadChecker) ObserveElection(sourceUID, app, election string, deleted bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	e, err := protocol.ParseElection(election)
	if deleted || err != nil || !e.Elected() {
		delete(sc.elections, sourceUID)
		return
	}
	if prev, ok := sc.elections[sourceUID]; !ok || prev.Election != e {
		sc.seq++
		sc.elections[sourceUID] = seenElection{Election: e, app: app, at: time.Now(), seq: sc.seq}
	}
	sc.judgeElections()
}

// seenElection is a source pod's election as the checker saw it.
type seenElection struct {
	protocol.Election
	app string
	// at is when the checker saw it first; seq its place in the order
	// the source's elections were seen (one watch: the order they were
	// written in).
	at  time.Time
	seq uint64
}

// resolveWithin bounds how long an election whose reservation the checker
// has not seen holds back the judgement of its siblings' elections: a
// watch that lags is seen within it; a candidate deleted before the
// checker saw its reservation never is.
const resolveWithin = 5 * time.Second

// countedNode is the node a candidate counts on: bound, allowed, or
// reserved under its source's election.
func (sc *SpreadChecker) countedNode(o Placement) string {
	if o.Node != "" || o.Reserved == "" {
		return o.Node
	}
	if e, ok := sc.elections[o.SourceUID]; ok && e.Nonce == o.Nonce && protocol.TargetLabelValue(e.Target) == o.Target {
		return o.Reserved
	}
	return ""
}

// Observe feeds one observed state of a candidate.
func (sc *SpreadChecker) Observe(p Placement, deleted bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	id := p.Cluster + "/" + p.UID
	if deleted {
		delete(sc.current, id)
		return
	}
	sc.current[id] = p
	sc.judgeElections()
}

// electedNode is the candidate an election names and the node it holds
// there (bound, or reserved); ok false while the checker has not seen it.
func (sc *SpreadChecker) electedNode(sourceUID string, e protocol.Election) (Placement, bool) {
	for _, o := range sc.current {
		if o.SourceUID != sourceUID || o.Terminating || o.Nonce != e.Nonce || o.Target != protocol.TargetLabelValue(e.Target) {
			continue
		}
		if o.Bound {
			return o, true
		}
		if o.Reserved != "" {
			o.Node = o.Reserved
			return o, true
		}
	}
	return Placement{}, false
}

// judgeElections judges each election not judged yet whose reservation,
// and whose siblings' elected reservations, the checker has seen.
func (sc *SpreadChecker) judgeElections() {
	now := time.Now()
	unresolved := map[string]bool{} // workloads with an election not seen yet
	elected := map[string]Placement{}
	for uid, e := range sc.elections {
		o, ok := sc.electedNode(uid, e.Election)
		if !ok {
			if now.Sub(e.at) < resolveWithin && !sc.judged[electionKey(uid, e.Election)] {
				unresolved[e.app] = true
			}
			continue
		}
		elected[uid] = o
	}
	uids := make([]string, 0, len(elected))
	for uid := range elected {
		uids = append(uids, uid)
	}
	// In the order they were made, each counting only the elections made
	// before it, as the source counted them.
	sort.Slice(uids, func(i, j int) bool { return sc.elections[uids[i]].seq < sc.elections[uids[j]].seq })
	for _, uid := range uids {
		o := elected[uid]
		if unresolved[o.App] {
			continue
		}
		e := sc.elections[uid]
		key := electionKey(uid, e.Election)
		if sc.judged[key] {
			continue
		}
		sc.judged[key] = true
		sc.judgedCount++
		pol, ok := sc.policies[o.App]
		if !ok || pol.When != DoNotSchedule {
			continue
		}
		if v, bad := sc.judge(o, pol, e.seq); bad {
			sc.report(string(v.Kind)+"/"+key, v)
		}
	}
}

func electionKey(uid string, e protocol.Election) string {
	return fmt.Sprintf("%s/%d/%s/%s", uid, e.Generation, e.Target, e.Nonce)
}

// Judged is how many elections were judged.
func (sc *SpreadChecker) Judged() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.judgedCount
}

// Violations so far.
func (sc *SpreadChecker) Violations() []chaos.Violation {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.judgeElections()
	return append([]chaos.Violation(nil), sc.sticky...)
}

func (sc *SpreadChecker) report(key string, v chaos.Violation) {
	if sc.reported[key] {
		return
	}
	sc.reported[key] = true
	sc.sticky = append(sc.sticky, v)
}

// domainOf is a node's values of keys, ok false when it lacks one.
func domainOf(labels map[string]string, keys []string) ([]string, bool) {
	out := make([]string, len(keys))
	for i, k := range keys {
		v, ok := labels[k]
		if !ok {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

// judge judges p's domain, counting the pods elected no later than
// election seq (and the bound or allowed ones whose election the checker
// did not see).
func (sc *SpreadChecker) judge(p Placement, pol Policy, seq uint64) (chaos.Violation, bool) {
	where := fmt.Sprintf("pod uid %s (workload %s) elected on %s in %s", p.SourceUID, p.App, p.Node, p.Cluster)
	node, known := sc.nodes[NodeRef{p.Cluster, p.Node}]
	if !known {
		return chaos.Violation{}, false
	}
	domain, ok := domainOf(node.Labels, pol.Keys)
	if !ok {
		return chaos.Violation{Kind: NoDomain, Detail: fmt.Sprintf("%s: the node has no %s (labels %v), under %s DoNotSchedule",
			where, strings.Join(pol.Keys, "/"), node.Labels, strings.Join(pol.Keys, "→"))}, true
	}
	// The domains the pod could run in.
	eligible := map[string][]string{}
	for ref, n := range sc.nodes {
		if !sc.live[ref.Cluster] {
			continue
		}
		d, ok := domainOf(n.Labels, pol.Keys)
		if !ok || !matches(p.Required, pol.Keys, n.Labels) || !fits(p.Requests, n.Allocatable) {
			continue
		}
		eligible[strings.Join(d, "\x00")] = d
	}
	// The workload's pods per domain, one per source pod.
	perSource := map[string][]string{}
	for _, o := range sc.current {
		node := sc.countedNode(o)
		if o.App != p.App || o.Terminating || node == "" {
			continue
		}
		if e, ok := sc.elections[o.SourceUID]; ok && e.seq > seq {
			continue
		}
		n, ok := sc.nodes[NodeRef{o.Cluster, node}]
		if !ok {
			continue
		}
		d, ok := domainOf(n.Labels, pol.Keys)
		if !ok {
			continue
		}
		if _, seen := perSource[o.SourceUID]; !seen || o.Bound {
			perSource[o.SourceUID] = d
		}
	}
	for level := range pol.Keys {
		counts := map[string]int{}
		for _, d := range eligible {
			if prefixEqual(d, domain, level) {
				counts[strings.Join(d[:level+1], "/")] += 0
			}
		}
		for _, d := range perSource {
			if prefixEqual(d, domain, level) {
				if _, in := counts[strings.Join(d[:level+1], "/")]; in {
					counts[strings.Join(d[:level+1], "/")]++
				}
			}
		}
		mine := strings.Join(domain[:level+1], "/")
		if _, in := counts[mine]; !in {
			continue
		}
		least, leastAt := -1, ""
		for _, k := range sortedKeys(counts) {
			if least < 0 || counts[k] < least {
				least, leastAt = counts[k], k
			}
		}
		if counts[mine]-least > int(pol.MaxSkew) {
			return chaos.Violation{Kind: Skew, Detail: fmt.Sprintf("%s: %s=%s then holds %d pods against %d in %s (maxSkew %d); per domain %v",
				where, pol.Keys[level], domain[level], counts[mine], least, leastAt, pol.MaxSkew, counts)}, true
		}
	}
	return chaos.Violation{}, false
}

// prefixEqual reports whether d and domain share their first level values.
func prefixEqual(d, domain []string, level int) bool {
	for i := 0; i < level; i++ {
		if d[i] != domain[i] {
			return false
		}
	}
	return true
}

// matches reports whether a node meets a candidate's required node
// affinity, leaving out the requirements on the spread's keys (the
// domain the agent pinned the candidate to).
func matches(required *corev1.NodeSelector, keys []string, nodeLabels map[string]string) bool {
	if required == nil || len(required.NodeSelectorTerms) == 0 {
		return true
	}
	trimmed := &corev1.NodeSelector{}
	for _, term := range required.NodeSelectorTerms {
		var t corev1.NodeSelectorTerm
		for _, r := range term.MatchExpressions {
			if !contains(keys, r.Key) {
				t.MatchExpressions = append(t.MatchExpressions, r)
			}
		}
		t.MatchFields = term.MatchFields
		trimmed.NodeSelectorTerms = append(trimmed.NodeSelectorTerms, t)
	}
	ns, err := nodeaffinity.NewNodeSelector(trimmed)
	if err != nil {
		return true
	}
	return ns.Match(&corev1.Node{ObjectMeta: objectMetaWithLabels(nodeLabels)})
}

// fits reports whether an empty node of allocatable could hold requests.
func fits(requests, allocatable corev1.ResourceList) bool {
	for k, v := range requests {
		a, ok := allocatable[k]
		if ok && a.Cmp(v) < 0 {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Expect is what a workload should look like after settling.
type Expect struct {
	// Replicas is how many live source pods it should have.
	Replicas int
	// Oracle is how many pods kube-scheduler placed; Slack how many fewer
	// Flotilla may place.
	Oracle, Slack int
}

// Settled checks a snapshot of the source and the targets after a phase:
// every candidate has its source pod (orphan); a bound source pod has
// exactly its delegate, in the target its virtual node stands for, and no
// other candidate (stray); a pending pod's election names a target that
// holds its candidate (open-election); a deleted pod is gone within its
// grace (stuck); each workload has its replicas (lost) and runs at least
// as many pods as kube-scheduler placed, less the slack (under-placed). It
// is pure, so a caller polls it until it passes or time runs out.
func Settled(snap chaos.Snapshot, targets []Target, expect map[string]Expect) []chaos.Violation {
	var out []chaos.Violation
	nodeOf := map[string]string{}
	for _, t := range targets {
		nodeOf[t.Key()] = t.VirtualNode()
	}
	sources := map[string]chaos.Source{}
	for _, s := range snap.Sources {
		sources[s.UID] = s
		if s.Terminating && !s.DeletionDeadline.IsZero() && snap.Taken.Sub(s.DeletionDeadline) > chaos.TerminationSlack {
			out = append(out, chaos.Violation{Kind: chaos.Stuck, Detail: fmt.Sprintf("pod %s/%s (uid %s) is still terminating %s after its deletion deadline (node %q)",
				s.Namespace, s.Name, s.UID, snap.Taken.Sub(s.DeletionDeadline).Round(time.Second), s.NodeName)})
		}
	}
	delegates := map[string]int{}
	held := map[string]bool{} // source uid + "/" + target
	for _, c := range snap.Candidates {
		held[c.SourceUID+"/"+c.Target] = true
		what := "candidate"
		if c.NodeName != "" {
			what = "delegate"
		}
		src, ok := sources[c.SourceUID]
		if !ok {
			out = append(out, chaos.Violation{Kind: chaos.Orphan, Detail: fmt.Sprintf("%s %s/%s in %s (target %s): source pod %s/%s (uid %s) is gone",
				what, c.Namespace, c.Name, c.Cluster, c.Target, c.SourceNamespace, c.SourceName, c.SourceUID)})
			continue
		}
		if src.NodeName == "" || src.Terminating || c.Terminating {
			continue
		}
		if c.NodeName != "" && nodeOf[c.Target] == src.NodeName {
			delegates[src.UID]++
			continue
		}
		out = append(out, chaos.Violation{Kind: chaos.Stray, Detail: fmt.Sprintf("%s %s/%s in %s (target %s, node %q): its pod %s/%s is bound to %s",
			what, c.Namespace, c.Name, c.Cluster, c.Target, c.NodeName, src.Namespace, src.Name, src.NodeName)})
	}
	placed, live := map[string]int{}, map[string]int{}
	for _, s := range snap.Sources {
		if s.Terminating {
			continue
		}
		live[s.App]++
		switch {
		case s.NodeName != "":
			placed[s.App]++
			if delegates[s.UID] != 1 {
				out = append(out, chaos.Violation{Kind: chaos.Stray, Detail: fmt.Sprintf("pod %s/%s is bound to %s with %d delegates", s.Namespace, s.Name, s.NodeName, delegates[s.UID])})
			}
		default:
			if e, err := protocol.ParseElection(s.Election); err == nil && e.Elected() && !held[s.UID+"/"+e.Target] {
				out = append(out, chaos.Violation{Kind: OpenElection, Detail: fmt.Sprintf("pending pod %s/%s (uid %s) is elected in %s, which holds no candidate of it (election %q)",
					s.Namespace, s.Name, s.UID, e.Target, s.Election)})
			}
		}
	}
	for _, app := range sortedKeys(expect) {
		e := expect[app]
		if live[app] != e.Replicas {
			out = append(out, chaos.Violation{Kind: chaos.Lost, Detail: fmt.Sprintf("workload %s has %d live source pods, wants %d", app, live[app], e.Replicas)})
		}
		if placed[app] < e.Oracle-e.Slack {
			out = append(out, chaos.Violation{Kind: UnderPlaced, Detail: fmt.Sprintf("workload %s: Flotilla runs %d pods, kube-scheduler %d (slack %d)", app, placed[app], e.Oracle, e.Slack)})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return kindIndex(out[i].Kind) < kindIndex(out[j].Kind)
		}
		return out[i].Detail < out[j].Detail
	})
	return out
}

// Slack is how many fewer pods of a workload Flotilla may run than
// kube-scheduler after settling: one, because kube-scheduler packs every
// node of the fleet as one pool in one order while Flotilla's targets each
// pack their own nodes in the order the elections come, and pods of
// different sizes can leave a node's remainder too small for one more pod
// of a workload in one world and not in the other; plus, for a joint
// region→zone spread, maxSkew of the zone level, since kube-scheduler's
// two constraints compare every zone with every zone and Flotilla's joint
// spread a zone only with the zones of its region, so either can hold back
// up to maxSkew pods the other places.
func Slack(w Workload) int {
	slack := 1
	if w.Policy.Joint() && w.Policy.When == DoNotSchedule {
		slack += int(w.Policy.MaxSkew)
	}
	return slack
}

func kindIndex(k chaos.Kind) int {
	for i, kk := range AllKinds {
		if kk == k {
			return i
		}
	}
	return len(AllKinds)
}

// CountKinds counts violations per kind, every kind present.
func CountKinds(vs []chaos.Violation) map[chaos.Kind]int {
	out := map[chaos.Kind]int{}
	for _, k := range AllKinds {
		out[k] = 0
	}
	for _, v := range vs {
		out[v.Kind]++
	}
	return out
}

func decodeState(raw string, st *protocol.State) error { return json.Unmarshal([]byte(raw), st) }

func decodeJSON(raw string, v any) error { return json.Unmarshal([]byte(raw), v) }

func objectMetaWithLabels(l map[string]string) metav1.ObjectMeta { return metav1.ObjectMeta{Labels: l} }
