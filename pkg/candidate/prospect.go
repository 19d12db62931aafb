package candidate

import (
	"math"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/target"
)

// Prospect is what the source knows of a target as it chooses which
// targets get a pod's candidates first: how much room it has, how fast and
// how often it finds a node, and what the placement policy prefers.
type Prospect struct {
	// Room is how many pods like this one the target's free totals hold
	// (its ClusterSummary); negative when unknown.
	Room float64
	// Answer is how long the target takes to answer a candidate, learned
	// (target.Outcomes); zero when unknown. It is at least the wait of the
	// candidate that has waited longest there.
	Answer time.Duration
	// Answered is the learned answer time of the answers alone
	// (target.Outcomes.Answered): a candidate waiting there is overdue
	// against it (Overdue).
	Answered time.Duration
	// Quiet is how long the target has answered none of this agent's
	// candidates (target.Outcomes.Quiet).
	Quiet time.Duration
	// Misses is the share of the target's recent candidates that found no
	// node, or no answer before the pod went elsewhere once overdue
	// (0..1).
	Misses float64
	// Preference is the placement policy's score of the target (the
	// weights of the preferred clusters it matches).
	Preference int64
	// Sure is set when a miss there is unlikely (SureOf): a pod drawn
	// there first gets that one candidate alone.
	Sure bool
}

const (
	// sureRoom is how many pods like this one a target's published room
	// must hold beyond the candidates this agent still waits for there
	// for one candidate to do.
	sureRoom = 8
	// sureMisses is the most share of recent misses of a sure target.
	sureMisses = 0.05
	// sureAnswer is the slowest a sure target answers, on average.
	sureAnswer = 2 * time.Second
	// OverdueAfter is how long a pod's lone candidate may wait for an
	// answer, at least, before a second joins it (OverdueAfterFor).
	OverdueAfter = target.OverdueAfter
	// OverdueConfirm is how long an agent must have seen a pod's
	// candidates in the same targets overdue before it acts on it: a
	// process that was paused or starved of CPU wakes with timers due and
	// caches that have not yet caught up with the answers given
	// meanwhile, and would find every candidate that waited through the
	// pause overdue for a moment.
	OverdueConfirm = 2 * time.Second
)

// SureOf says whether one candidate is enough for a target: its published
// room (room, in pods like this one; negative when unknown) holds sureRoom
// pods beyond the candidates this agent waits for there (waiting), it
// missed almost none of its recent candidates and answers within
// sureAnswer. A target the agent has heard nothing from yet (ended 0) is
// not sure.
func SureOf(room float64, waiting, ended int, answer time.Duration, misses float64) bool {
	return room >= 0 && room-float64(waiting) >= sureRoom && ended > 0 && answer <= sureAnswer && misses <= sureMisses
}

// OverdueAfterFor is how long a lone candidate waits in a target that
// answers in answer on average before a second joins it: three times that,
// at least OverdueAfter.
func OverdueAfterFor(answer time.Duration) time.Duration {
	return target.OverdueAfterFor(answer)
}

// Heard is the prospect of a target as far as its answers to this agent's
// candidates tell it (Answer, Answered, Quiet, Misses); the rest is zero.
func Heard(o target.Outcomes) Prospect {
	return Prospect{Answer: o.Answer, Answered: o.Answered, Quiet: o.Quiet, Misses: o.Misses}
}

// OverdueAfter is how long a candidate may wait for the target's answer
// before it is overdue: OverdueAfterFor the answers it gave.
func (p Prospect) OverdueAfter() time.Duration { return OverdueAfterFor(p.Answered) }

// Overdue says whether a candidate that has waited this long for the
// target's answer waits past what the target's answers make likely: past
// OverdueAfter, while the target answered no other candidate either for as
// long. A busy target that keeps answering (its queue growing in a burst)
// is not stalled: a second candidate there would only add to the queues.
func (p Prospect) Overdue(waited time.Duration) bool {
	bar := p.OverdueAfter()
	return waited > bar && p.Quiet > bar
}

// Weight is the target's share of first candidates, against the others':
// in proportion to its room, to how fast it answers (1 ÷ (1 s + the
// answer time): a target that answers in 1 s gets twice the pods of one
// that takes 3 s), and to the share of candidates it did not miss (at
// least a twentieth, so that a target that missed is tried again now and
// then);
// each 20 points of preference double it (a preference of weight 100
// makes a target 32 times as likely to come first). A target of unknown
// room weighs as if it had room for one pod: give it the others' average
// (FillRoom) to weigh it like them.
func (p Prospect) Weight() float64 {
	room := p.Room
	if room < 0 {
		room = 1
	}
	// A target that looks full still gets a chance: its summary lags, and
	// its candidate is what tells an autoscaler to grow it.
	room = max(room, 0.1)
	speed := 1 / (1 + p.Answer.Seconds())
	found := max(1-p.Misses, 0.05)
	prefer := math.Exp2(float64(max(p.Preference, 0)) / 20)
	return room * speed * found * prefer
}

// FillRoom gives the prospects of unknown room the average room of the
// others, so that a target that publishes no summary is neither favoured
// nor left out.
func FillRoom(ps map[string]Prospect) {
	sum, known := 0.0, 0
	for _, p := range ps {
		if p.Room >= 0 {
			sum += p.Room
			known++
		}
	}
	if known == 0 {
		return
	}
	for name, p := range ps {
		if p.Room < 0 {
			p.Room = sum / float64(known)
			ps[name] = p
		}
	}
}
