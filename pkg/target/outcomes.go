package target

import (
	"container/list"
	"math"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Outcomes is what the source learned of how a target answers the
// candidates this agent sent it: how long it takes to reserve a node or to
// find none, and how often it misses. It is kept in memory only: an agent
// that restarts learns again, from its first answers.
type Outcomes struct {
	// Answer is the time from creating a candidate to the target's answer,
	// a moving average; a candidate deleted before any answer (its pod
	// went elsewhere first) counts the time until then if it was overdue
	// or its target never answered (outcomes.deleted). It is at least the
	// age of the oldest candidate still waiting for one, as long as the
	// target has answered none since (Quiet), so a target that stops
	// answering loses its place as its wait grows. Zero before anything
	// is known.
	Answer time.Duration `json:"-"`
	// AnswerSeconds is Answer in seconds, for /debug/state.
	AnswerSeconds float64 `json:"answerSeconds"`
	// Answered is that moving average alone, not raised by the candidates
	// still waiting: what a candidate's wait is judged against (is it
	// overdue?). Were it Answer, the oldest waiting candidate would never
	// be overdue, its own wait raising the bar.
	Answered time.Duration `json:"-"`
	// Quiet is how long the target has given no answer to any of this
	// agent's candidates (since the oldest still waiting was sent, when it
	// never answered one). A target that keeps answering others is busy,
	// not stalled: a candidate waiting there is not overdue
	// (candidate.Prospect.Overdue).
	Quiet time.Duration `json:"-"`
	// QuietSeconds is Quiet in seconds, for /debug/state.
	QuietSeconds float64 `json:"quietSeconds"`
	// Misses is the share of recent candidates (0..1) the target found no
	// node for, or left overdue (OverdueAfterFor its answers; any, when it
	// never answered) until this agent deleted them: a moving average that
	// fades with time since the last candidate ended, so a target full an
	// hour ago is tried again.
	Misses float64 `json:"misses"`
	// Waiting is how many candidates wait for an answer.
	Waiting int `json:"waiting"`
	// Ended is how many candidates were counted since the agent started.
	Ended int `json:"ended"`
}

// OverdueAfter is how long a candidate may wait for its target's answer,
// at least, before it is overdue (OverdueAfterFor).
const OverdueAfter = 3 * time.Second

// OverdueAfterFor is how long a candidate waits, in a target that answers
// in answer on average, before it is overdue: three times that, at least
// OverdueAfter. The fan-out then sends a lone candidate's second
// (candidate.Prospect.Overdue), and a candidate deleted unanswered sooner
// than that is no miss (outcomes.deleted).
func OverdueAfterFor(answer time.Duration) time.Duration {
	return max(OverdueAfter, 3*answer)
}

const (
	// outcomeWeight is the weight of the newest candidate in the averages.
	outcomeWeight = 0.2
	// missHalfLife is how fast the share of misses fades without news.
	missHalfLife = time.Minute
	// forgetWaitingAfter drops a candidate that never got an answer the
	// agent saw (deleted while it was not watching, or long denied).
	forgetWaitingAfter = 10 * time.Minute
)

// outcomes learns Outcomes from the candidates this agent creates, the
// answers its cache then shows, and the candidates it deletes unanswered.
type outcomes struct {
	mu  sync.Mutex
	now func() time.Time
	// waiting holds the candidates sent and not answered yet, oldest first;
	// byKey finds them.
	waiting *list.List
	byKey   map[string]*list.Element
	// answer is the average answer time in seconds; misses the average of
	// 1 per miss and 0 per reservation, as of last.
	answer, misses float64
	last           time.Time
	ended          int
	// replyTime is the average time in seconds of the target's answers
	// alone (a reservation, or no node), replied how many it gave: what a
	// candidate deleted unanswered is judged against (deleted).
	replyTime float64
	replied   int
	// heard is when the target last answered one of the candidates.
	heard time.Time
}

type sent struct {
	key string
	at  time.Time
}

func newOutcomes() *outcomes {
	return &outcomes{now: time.Now, waiting: list.New(), byKey: map[string]*list.Element{}}
}

// candidateKey names a candidate in outcomes.
func candidateKey(namespace, name string) string { return namespace + "/" + name }

// sent records a candidate this agent is about to create, and reports
// whether it was not waiting already.
func (o *outcomes) sent(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.byKey[key]; ok {
		return false
	}
	o.byKey[key] = o.waiting.PushBack(sent{key: key, at: o.now()})
	return true
}

// unsent forgets a candidate sent whose creation failed.
func (o *outcomes) unsent(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.drop(key)
}

// deleted counts a candidate this agent deleted while it still waited for
// an answer as a miss, unless the target has answered candidates before
// and this one was not overdue yet against those answers
// (OverdueAfterFor): its pod went elsewhere while this target could still
// answer in its time, which tells nothing of the target, so it is dropped
// as one deleted by another is. Counted, such lost races made a target
// that answered in its time in a burst look like one that misses: the
// pods drawn there got a second candidate, which lost more races (1.4 to
// 1.65 candidates a pod in bursts whose agent bound sooner, against 1.2).
// A target that never answered, or that left a candidate overdue, still
// misses.
func (o *outcomes) deleted(key string) {
	o.mu.Lock()
	if e, ok := o.byKey[key]; ok && o.replied > 0 && o.now().Sub(e.Value.(sent).at) < OverdueAfterFor(time.Duration(o.replyTime*float64(time.Second))) {
		o.drop(key)
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	o.end(key, true, false)
}

// seen looks at a candidate's change in the cache: its first answer ends
// it; one deleted by someone else is only dropped.
func (o *outcomes) seen(c *corev1.Pod) {
	key := candidateKey(c.Namespace, c.Name)
	o.mu.Lock()
	_, waiting := o.byKey[key]
	o.mu.Unlock()
	if !waiting {
		// Answered, or not sent by this agent: nothing to read.
		return
	}
	switch {
	case c.DeletionTimestamp != nil:
		o.mu.Lock()
		o.drop(key)
		o.mu.Unlock()
	case ReservedOrBound(c):
		o.hear()
		o.end(key, false, true)
	case Unschedulable(c) != "":
		o.hear()
		o.end(key, true, true)
	}
}

// hear records that the target answered a candidate now.
func (o *outcomes) hear() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.heard = o.now()
}

func (o *outcomes) drop(key string) (sent, bool) {
	e, ok := o.byKey[key]
	if !ok {
		return sent{}, false
	}
	delete(o.byKey, key)
	return o.waiting.Remove(e).(sent), true
}

// end counts a waiting candidate's outcome, if it is still waiting:
// missed when the target found no node or it was deleted unanswered,
// replied when the target answered it.
func (o *outcomes) end(key string, missed, replied bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.drop(key)
	if !ok {
		return
	}
	now := o.now()
	o.misses = o.fadedMisses(now)
	took := now.Sub(s.at).Seconds()
	m := 0.0
	if missed {
		m = 1
	}
	if o.ended == 0 {
		o.answer, o.misses = took, m
	} else {
		o.answer += outcomeWeight * (took - o.answer)
		o.misses += outcomeWeight * (m - o.misses)
	}
	o.ended++
	o.last = now
	if replied {
		if o.replied == 0 {
			o.replyTime = took
		} else {
			o.replyTime += outcomeWeight * (took - o.replyTime)
		}
		o.replied++
	}
}

// fadedMisses is the share of misses as of now; o.mu is held.
func (o *outcomes) fadedMisses(now time.Time) float64 {
	if o.ended == 0 {
		return 0
	}
	return o.misses * math.Exp2(-now.Sub(o.last).Seconds()/missHalfLife.Seconds())
}

// get reports the outcomes as of now, and drops candidates that waited
// too long to still tell anything.
func (o *outcomes) get() Outcomes {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	for e := o.waiting.Front(); e != nil; e = o.waiting.Front() {
		s := e.Value.(sent)
		if now.Sub(s.at) < forgetWaitingAfter {
			break
		}
		o.drop(s.key)
	}
	out := Outcomes{Misses: o.fadedMisses(now), Waiting: o.waiting.Len(), Ended: o.ended}
	answer := o.answer
	out.Answered = time.Duration(answer * float64(time.Second))
	if !o.heard.IsZero() {
		out.Quiet = now.Sub(o.heard)
	}
	if e := o.waiting.Front(); e != nil {
		oldest := now.Sub(e.Value.(sent).at)
		if o.heard.IsZero() {
			out.Quiet = oldest
		}
		// The oldest wait raises the answer time only as long as the
		// target has answered nothing since: a target that keeps
		// answering others is busy, not stalled (as for Overdue), and
		// one candidate whose answer this agent missed must not make it
		// look slow for as long as that candidate is remembered.
		answer = max(answer, min(oldest, out.Quiet).Seconds())
	}
	out.QuietSeconds = out.Quiet.Seconds()
	out.Answer, out.AnswerSeconds = time.Duration(answer*float64(time.Second)), answer
	return out
}

// Outcomes reports what the agent learned of how the target answers.
func (t *Target) Outcomes() Outcomes { return t.outcomes.get() }

// ReservedOrBound reports whether a candidate's target holds a reservation
// for it or bound it.
func ReservedOrBound(c *corev1.Pod) bool {
	raw := c.Annotations[protocol.StateAnnotation]
	if raw == "" {
		return false
	}
	s, err := protocol.ParseState(raw)
	return err == nil && (s.Phase == protocol.PhaseReserved || s.Phase == protocol.PhaseBound)
}

// Unschedulable is the target scheduler's reason for finding no node for a
// candidate, or "" when it has not said so.
//
// Waiting for the source is not failing: a candidate whose Permit timed
// out (its source was slow, failing over, or elected elsewhere) carries an
// Unschedulable condition until its next failure or binding, though it may
// be reserved again; the condition does not count while the target reports
// a reservation, nor when it is the Permit timeout's own, nor when the
// source's denial turned the candidate away.
func Unschedulable(c *corev1.Pod) string {
	if ReservedOrBound(c) {
		return ""
	}
	for _, cond := range c.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable &&
			!strings.Contains(cond.Message, permitTimeoutMessage) && !strings.Contains(cond.Message, protocol.DeniedMessage) {
			return cond.Message
		}
	}
	return ""
}

// permitTimeoutMessage is how kube-scheduler's framework words a Permit
// wait that timed out (framework/runtime/waiting_pods_map.go), which then
// becomes the candidate's Unschedulable condition.
const permitTimeoutMessage = "rejected due to timeout after waiting"
