package reservation

import (
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// memory is what this process remembers between reconciles that the
// source pods and the candidates do not say: per pod, one podMemo, and per
// gang, the size its owner gave. Each part saves a write or a read, keeps
// a wait counting across rounds, or keeps a released election's domain
// counting for a while, and each expires on its own: a restart, which
// loses it all at once, costs what those expiries cost (waits that start
// again, writes that lose their races, a domain that stops counting, a
// problem reported once more).
//
// A pod's memo goes at once when the pod is placed (forget); a pod deleted
// before it was placed leaves its memo behind under a UID nothing asks
// for again, so sweep drops each part of a memo once it is older than
// what it is kept for.
type memory struct {
	mu    sync.Mutex
	pods  map[types.UID]*podMemo
	gangs map[string]gangSize
	// allowWakes are when a round last woke the gang of its key (its
	// gang.Spec.Key) on finding it elected whole (wakeForAllowance).
	allowWakes map[string]time.Time
	// gangPolls are until when a member of the gang of key looks at it
	// again soon (pollGang).
	gangPolls map[string]time.Time
	// gangTargets are the targets rounds last chose for oneCluster gangs
	// complete there, by key, and when (keptTarget).
	gangTargets map[string]chosenTarget
	// gangMost are the most places rounds counted for each gang, by key,
	// and when that most was first counted (gangCloser).
	gangMost map[string]mostHeld
}

// mostHeld is the most places rounds counted for a gang, and since when.
type mostHeld struct {
	held int
	at   time.Time
}

// chosenTarget is a target a round chose for its gang, and when.
type chosenTarget struct {
	target string
	at     time.Time
}

// gangKeepFor is how long the target a round chose for its oneCluster
// gang steers the next rounds' choice (gang.DecideKeeping): longer than an
// election takes to be written and seen, under load.
const gangKeepFor = 5 * time.Second

// podMemo is what this process remembers of one source pod; a nil field
// is nothing remembered.
type podMemo struct {
	// firstReserved is when the pod's first reservation was seen, for a
	// policy's scoring window: forgotten, the window starts again, which
	// only delays the election.
	firstReserved *time.Time
	// policyProblem is why a policy meant to govern the pod does not, as
	// last reported, so that it is reported once.
	policyProblem *reported
	// gangProblem is what is wrong with the pod's gang, as last reported,
	// so that it is reported once.
	gangProblem *reported
	// bound is when this process bound the pod, while the cache may not
	// show it yet: a stale reconcile does not bind again (the API server
	// would refuse it, at the cost of a write).
	bound *time.Time
	// election is the election this process last wrote on the pod, until
	// the cache shows it: a reconcile on an older copy would only lose the
	// optimistic-concurrency race, at the cost of a write, and its
	// siblings count it from here meanwhile.
	election *writtenElection
	// electedDomain is the domain of the node of the pod's last elected
	// reservation, as its target reported it: once released, it still
	// counts among the domains a re-election judges against.
	electedDomain *electedDomain
	// full is when the pod's candidate, pinned to a domain (by key) of a
	// target (by name), found no node: its next candidate in that target
	// is pinned to another domain the spread allows, as kube-scheduler
	// tries a pod on the nodes of every allowed domain.
	full map[string]map[string]time.Time
	// denied is, per target, the nonce of the reservation this process
	// last denied there and when: its target may have let it go already,
	// so it is never elected nor counted as a gang's place, even once the
	// denial is lifted; the target's next reservation has a new nonce.
	denied *deniedNonces
	// steady is since when the pod has been in the state each clock
	// watches.
	steady [steadyClocks]*steadySince
	// candidates are the targets where the pod's last round, a gang
	// member's, found or made its candidates (noteCandidates): the other
	// members' rounds read it there alone. Forgotten, they read it in
	// every target.
	candidates *seenCandidates
}

// seenCandidates are the targets where a gang member's last round found or
// made its candidates, and when.
type seenCandidates struct {
	targets []string
	at      time.Time
}

// steadyClock names a wait that counts from when a pod entered a state,
// as this process saw it, and starts again when the state changes.
type steadyClock int

const (
	// electionClock counts how long the pod's election has stood unbound,
	// for ElectionTimeout.
	electionClock steadyClock = iota
	// denyClock counts how long the pod has had the same candidates to
	// deny under the same election, for DenyAfter.
	denyClock
	// repinClock counts how long the pod has had the same candidates
	// pinned to closed domains, for repinAfter.
	repinClock
	// overdueClock counts how long the pod's candidates in the same
	// targets have stood overdue, for overdueConfirm.
	overdueClock
	// fallbackClock counts the same for the targets of a policy's
	// fallback groups, which widen on it apart from the fan-out window.
	fallbackClock
	// preElectionClock counts the same for the target of a pod's
	// pre-election, which is revoked on it.
	preElectionClock
	steadyClocks
)

type steadySince struct {
	key string
	at  time.Time
}

// reported is a message told to a pod's owner, and when.
type reported struct {
	msg string
	at  time.Time
}

// writtenElection is an election this process wrote on a source pod.
type writtenElection struct {
	value string
	// domain is the elected-domain annotation written with it.
	domain string
	at     time.Time
	// rv is the resourceVersion of the pod the write returned: the cache's
	// event of that object is its echo (electionEcho).
	rv string
	// awaited is set once a round found the cache without it (stale): its
	// echo is awaited, and brings the pod's round at once.
	awaited bool
}

// electedDomain is a domain of a pod's last election.
type electedDomain struct {
	target string
	domain map[string]string
	at     time.Time
}

// gangSize is the size of a gang as its owner gives it, or why it gives
// none.
type gangSize struct {
	n   int
	err error
	at  time.Time
}

// rememberFullFor is how long a domain where a pod's candidate found no
// node is pinned to no more for that pod: nodes free up, and the domain
// may be the spread's best again.
const rememberFullFor = 2 * time.Minute

// rememberProblemsFor is how long a problem reported of a pod keeps the
// same problem from being reported again.
const rememberProblemsFor = time.Hour

// rememberStateFor is how long a steady clock of a pod that is no longer
// looked at is kept: far longer than any wait it counts.
const rememberStateFor = time.Hour

// memoOf is the memo of uid, made when create is set; nil otherwise when
// there is none. m.mu is held.
func (m *memory) memoOf(uid types.UID, create bool) *podMemo {
	if p := m.pods[uid]; p != nil || !create {
		return p
	}
	if m.pods == nil {
		m.pods = map[types.UID]*podMemo{}
	}
	p := &podMemo{}
	m.pods[uid] = p
	return p
}

// dropIfEmpty drops the memo of uid once nothing is left in it. m.mu is
// held.
func (m *memory) dropIfEmpty(uid types.UID, p *podMemo) {
	if p != nil && p.empty() {
		delete(m.pods, uid)
	}
}

func (p *podMemo) empty() bool {
	for _, s := range p.steady {
		if s != nil {
			return false
		}
	}
	return p.firstReserved == nil && p.policyProblem == nil && p.gangProblem == nil && p.bound == nil &&
		p.election == nil && p.electedDomain == nil && p.full == nil && p.denied == nil && p.candidates == nil
}

// forget drops everything remembered of a pod: it is placed.
func (m *memory) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pods, uid)
}

// sweep drops what has grown older than it is kept for: of each pod, each
// part by its own age, and a gang's size after gangSizeTTL.
func (m *memory) sweep(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	older := func(at time.Time, age time.Duration) bool { return now.Sub(at) > age }
	for uid, p := range m.pods {
		if p.firstReserved != nil && older(*p.firstReserved, staleWindow) {
			p.firstReserved = nil
		}
		if p.policyProblem != nil && older(p.policyProblem.at, rememberProblemsFor) {
			p.policyProblem = nil
		}
		if p.gangProblem != nil && older(p.gangProblem.at, rememberProblemsFor) {
			p.gangProblem = nil
		}
		// A binding or an election the cache has not shown within
		// staleWindow is not waited for any more: staleElection believes
		// the cache again, and a second bind meets the conflict that bind
		// reads back.
		if p.bound != nil && older(*p.bound, staleWindow) {
			p.bound = nil
		}
		if p.election != nil && older(p.election.at, staleWindow) {
			p.election = nil
		}
		if p.electedDomain != nil && older(p.electedDomain.at, rememberDomainFor) {
			p.electedDomain = nil
		}
		if p.full != nil && fullStale(p.full, now) {
			p.full = nil
		}
		// By then its target has acted on the denial.
		if p.denied != nil && older(p.denied.at, staleWindow) {
			p.denied = nil
		}
		for i, s := range p.steady {
			if s != nil && older(s.at, rememberStateFor) {
				p.steady[i] = nil
			}
		}
		// A member that waits records them again at each round.
		if p.candidates != nil && older(p.candidates.at, rememberStateFor) {
			p.candidates = nil
		}
		m.dropIfEmpty(uid, p)
	}
	for key, s := range m.gangs {
		if older(s.at, gangSizeTTL) {
			delete(m.gangs, key)
		}
	}
	for key, at := range m.allowWakes {
		if older(at, gangRecheck) {
			delete(m.allowWakes, key)
		}
	}
	for key, until := range m.gangPolls {
		if now.After(until) {
			delete(m.gangPolls, key)
		}
	}
	for key, c := range m.gangTargets {
		if older(c.at, gangKeepFor) {
			delete(m.gangTargets, key)
		}
	}
	for key, most := range m.gangMost {
		if older(most.at, rememberStateFor) {
			delete(m.gangMost, key)
		}
	}
}

// gangCloser records that a round counted held places for the gang of
// key, and returns since when the most places counted for it stand: now,
// when held is more than ever counted. A gang whose reservations come and
// go without ever adding up to more than before is not coming closer.
func (m *memory) gangCloser(key string, held int, now time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	most, ok := m.gangMost[key]
	if ok && held <= most.held {
		return most.at
	}
	if m.gangMost == nil {
		m.gangMost = map[string]mostHeld{}
	}
	m.gangMost[key] = mostHeld{held: held, at: now}
	return now
}

// noteGangTarget records the target a round chose for the gang of key.
func (m *memory) noteGangTarget(key, target string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gangTargets == nil {
		m.gangTargets = map[string]chosenTarget{}
	}
	m.gangTargets[key] = chosenTarget{target: target, at: now}
}

// keptTarget is the target a round chose for the gang of key less than
// gangKeepFor ago, "" for none.
func (m *memory) keptTarget(key string, now time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.gangTargets[key]
	if !ok || now.Sub(c.at) >= gangKeepFor {
		return ""
	}
	return c.target
}

// wakeForAllowance reports whether a round that found the gang of key
// elected whole wakes the gang's other members now: once per gangRecheck,
// so that the members it wakes, each finding the gang elected whole too,
// do not each wake the others again.
func (m *memory) wakeForAllowance(key string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if at, ok := m.allowWakes[key]; ok && now.Sub(at) < gangRecheck {
		return false
	}
	if m.allowWakes == nil {
		m.allowWakes = map[string]time.Time{}
	}
	m.allowWakes[key] = now
	return true
}

// pollGang reports whether a round that would look at the gang of key
// again within d does so: yes unless another member's round already
// looks at it again by now+d. One member looking soon is enough: the
// round that finds the gang elected whole wakes the others
// (wakeForAllowance); every elected member looking every d would cost n
// rounds of n observations each per d while a gang's elections are
// written.
func (m *memory) pollGang(key string, now time.Time, d time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if until, ok := m.gangPolls[key]; ok && now.Before(until) {
		return false
	}
	if m.gangPolls == nil {
		m.gangPolls = map[string]time.Time{}
	}
	m.gangPolls[key] = now.Add(d)
	return true
}

// noteCandidates records the targets where a gang member's round found or
// made its candidates. Only the member's own rounds make its candidates,
// so no other target holds one, but for one a later round of it makes
// before it records that round's targets in turn.
func (m *memory) noteCandidates(uid types.UID, targets []string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.memoOf(uid, true).candidates = &seenCandidates{targets: targets, at: now}
}

// candidateTargets are the targets recorded by noteCandidates; known is
// false when none are (the pod's rounds ran in another process, or long
// ago).
func (m *memory) candidateTargets(uid types.UID) (targets []string, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.memoOf(uid, false)
	if p == nil || p.candidates == nil {
		return nil, false
	}
	return p.candidates.targets, true
}

// reservedSince is when the pod's first reservation was seen: now, when
// none was before.
func (m *memory) reservedSince(uid types.UID, now time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.memoOf(uid, true)
	if p.firstReserved == nil {
		p.firstReserved = &now
	}
	return *p.firstReserved
}

// policyProblemIsNew records msg as the pod's policy problem, and reports
// whether it differs from the one last recorded (or none was).
func (m *memory) policyProblemIsNew(uid types.UID, msg string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.memoOf(uid, true)
	prev := p.policyProblem
	p.policyProblem = &reported{msg, now}
	return prev == nil || prev.msg != msg
}

// gangProblemIsNew records msg as the problem of the pod's gang, and
// reports whether it differs from the one last recorded (or none was).
func (m *memory) gangProblemIsNew(uid types.UID, msg string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.memoOf(uid, true)
	prev := p.gangProblem
	p.gangProblem = &reported{msg, now}
	return prev == nil || prev.msg != msg
}

// gangProblemSolved forgets the problem of the pod's gang: a new one is
// reported again, even if it was reported before.
func (m *memory) gangProblemSolved(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.memoOf(uid, false); p != nil {
		p.gangProblem = nil
		m.dropIfEmpty(uid, p)
	}
}

// noteBound records that this process bound the pod.
func (m *memory) noteBound(uid types.UID, now time.Time) {
	m.note(uid, func(p *podMemo) { p.bound = &now })
}

// boundHere reports whether this process bound the pod and the pod was
// not seen bound since.
func (m *memory) boundHere(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.memoOf(uid, false)
	return p != nil && p.bound != nil
}

// noteElection records the election this process wrote on the pod.
func (m *memory) noteElection(uid types.UID, w writtenElection) {
	m.note(uid, func(p *podMemo) { p.election = &w })
}

// electionWritten is the election this process last wrote on the pod,
// until forgetElection.
func (m *memory) electionWritten(uid types.UID) (writtenElection, bool) {
	return recalled(m, uid, func(p *podMemo) *writtenElection { return p.election })
}

// electionEcho reports whether pod, as an event of the source pods brings
// it, is the object this process's last election write on it returned,
// and no round awaits it (awaitElection).
func (m *memory) electionEcho(pod *corev1.Pod) bool {
	w, ok := m.electionWritten(pod.UID)
	return ok && !w.awaited && w.rv != "" && w.rv == pod.ResourceVersion
}

// awaitElection records that a round found the cache without the
// election this process wrote on the pod: its echo brings the next round
// at once (electionEcho).
func (m *memory) awaitElection(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.memoOf(uid, false); p != nil && p.election != nil {
		p.election.awaited = true
	}
}

// forgetElection forgets the election written on the pod: the cache shows
// it, or is believed again.
func (m *memory) forgetElection(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.memoOf(uid, false); p != nil {
		p.election = nil
		m.dropIfEmpty(uid, p)
	}
}

// noteElectedDomain records the domain of the pod's elected reservation.
func (m *memory) noteElectedDomain(uid types.UID, d electedDomain) {
	m.note(uid, func(p *podMemo) { p.electedDomain = &d })
}

// note sets a part of the pod's memo, which it makes if the pod has none.
func (m *memory) note(uid types.UID, set func(*podMemo)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set(m.memoOf(uid, true))
}

// lastElectedDomain is the domain of the pod's last elected reservation,
// however old.
func (m *memory) lastElectedDomain(uid types.UID) (electedDomain, bool) {
	return recalled(m, uid, func(p *podMemo) *electedDomain { return p.electedDomain })
}

// recalled is the part of the pod's memo that part picks, if it holds one.
func recalled[T any](m *memory, uid types.UID, part func(*podMemo) *T) (T, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var v *T
	if p := m.memoOf(uid, false); p != nil {
		v = part(p)
	}
	if v == nil {
		var zero T
		return zero, false
	}
	return *v, true
}

// deniedNonces are the reservations a pod's denials were written for.
type deniedNonces struct {
	at     time.Time
	nonces map[string]string // target -> nonce
}

// noteDenied records that this process denied the pod's reservation of
// nonce in target.
func (m *memory) noteDenied(uid types.UID, target, nonce string, now time.Time) {
	m.note(uid, func(p *podMemo) {
		if p.denied == nil {
			p.denied = &deniedNonces{nonces: map[string]string{}}
		}
		p.denied.at = now
		p.denied.nonces[target] = nonce
	})
}

// deniedHere reports whether o is a reservation of the pod that this
// process denied (deniedNonces), whatever its denial annotation says now.
func (m *memory) deniedHere(uid types.UID, o Observed) bool {
	if o.State.Phase != protocol.PhaseReserved || o.State.Nonce == "" {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.memoOf(uid, false)
	return p != nil && p.denied != nil && p.denied.nonces[o.Target] == o.State.Nonce
}

// noteFull records that the pod's candidate in target, pinned to the
// domain of that key, found no node.
func (m *memory) noteFull(uid types.UID, target, domain string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.memoOf(uid, true)
	if p.full == nil {
		p.full = map[string]map[string]time.Time{}
	}
	if p.full[target] == nil {
		p.full[target] = map[string]time.Time{}
	}
	p.full[target][domain] = now
}

// fullFor is, per target, the keys of the domains where the pod's
// candidate found no node within rememberFullFor; nil when it never did
// (as far as this process remembers).
func (m *memory) fullFor(uid types.UID, now time.Time) map[string]map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.memoOf(uid, false)
	if p == nil || p.full == nil {
		return nil
	}
	out := map[string]map[string]bool{}
	for target, domains := range p.full {
		for key, at := range domains {
			if now.Sub(at) > rememberFullFor {
				continue
			}
			if out[target] == nil {
				out[target] = map[string]bool{}
			}
			out[target][key] = true
		}
	}
	return out
}

// fullStale reports whether every record of full is older than
// rememberFullFor.
func fullStale(full map[string]map[string]time.Time, now time.Time) bool {
	for _, domains := range full {
		for at := range maps.Values(domains) {
			if now.Sub(at) <= rememberFullFor {
				return false
			}
		}
	}
	return true
}

// since is when the pod was first seen in state key of clock, now if it
// was in another.
func (m *memory) since(uid types.UID, clock steadyClock, key string, now time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.memoOf(uid, true)
	if s := p.steady[clock]; s != nil && s.key == key {
		return s.at
	}
	p.steady[clock] = &steadySince{key, now}
	return now
}

// stop stops the pod's clock: the state it counted ended.
func (m *memory) stop(uid types.UID, clock steadyClock) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.memoOf(uid, false); p != nil {
		p.steady[clock] = nil
		m.dropIfEmpty(uid, p)
	}
}

// gangSizeOf is the size of the gang of key as last read, when read less
// than gangSizeTTL ago.
func (m *memory) gangSizeOf(key string, now time.Time) (gangSize, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.gangs[key]
	if !ok || now.Sub(s.at) >= gangSizeTTL {
		return gangSize{}, false
	}
	return s, true
}

// noteGangSize records the size of the gang of key as just read.
func (m *memory) noteGangSize(key string, s gangSize) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gangs == nil {
		m.gangs = map[string]gangSize{}
	}
	m.gangs[key] = s
}
