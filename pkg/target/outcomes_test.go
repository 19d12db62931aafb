package target

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestOutcomes checks what the source learns of a target: the time to the
// first answer of each candidate it sent, misses (no node found, or left
// overdue until the agent deleted the candidate), the wait of candidates
// with no answer yet, and that candidates deleted by others, or by the
// agent before they were overdue, do not count.
func TestOutcomes(t *testing.T) {
	now := time.Unix(1000, 0)
	o := newOutcomes()
	o.now = func() time.Time { return now }
	if got := o.get(); got != (Outcomes{}) {
		t.Fatalf("nothing sent: %+v", got)
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "ns", Name: name} }
	reserved := func(name string) *corev1.Pod {
		c := &corev1.Pod{ObjectMeta: meta(name)}
		c.Annotations = map[string]string{protocol.StateAnnotation: `{"phase":"Reserved","nonce":"n"}`}
		return c
	}
	refused := func(name string) *corev1.Pod {
		c := &corev1.Pod{ObjectMeta: meta(name)}
		c.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available"}}
		return c
	}
	near := func(a, b float64) bool { return a > b-1e-9 && a < b+1e-9 }

	o.sent(candidateKey("ns", "a"))
	now = now.Add(time.Second)
	o.sent(candidateKey("ns", "b"))
	now = now.Add(time.Second)
	// The answer time grows with the oldest wait; the time of the answers
	// given (none yet) does not. Never heard from, the target has been
	// quiet since the oldest was sent.
	if got := o.get(); got.Answer != 2*time.Second || got.AnswerSeconds != 2 || got.Waiting != 2 || got.Answered != 0 || got.Quiet != 2*time.Second {
		t.Errorf("two waiting, the oldest for 2s: %+v", got)
	}
	o.seen(&corev1.Pod{ObjectMeta: meta("a")}) // no answer yet
	o.seen(reserved("a"))
	o.seen(reserved("a")) // counted once
	if got := o.get(); got.Ended != 1 || got.Waiting != 1 || got.Misses != 0 || got.Answer != 2*time.Second || got.Answered != 2*time.Second || got.Quiet != 0 {
		t.Errorf("a answered in 2s, just now: %+v", got)
	}

	// b is deleted by someone else: it neither counts nor holds the
	// answer time up any longer.
	b := &corev1.Pod{ObjectMeta: meta("b")}
	b.DeletionTimestamp = &metav1.Time{Time: now}
	o.seen(b)
	now = now.Add(10 * time.Second)
	if got := o.get(); got.Waiting != 0 || got.Ended != 1 || got.Answer != 2*time.Second {
		t.Errorf("b deleted by another: %+v", got)
	}
	o.sent(candidateKey("ns", "c"))
	now = now.Add(7 * time.Second)
	o.seen(refused("c"))
	got := o.get()
	if got.Ended != 2 || !near(got.Misses, outcomeWeight) || !near(got.AnswerSeconds, 2+outcomeWeight*(7-2)) {
		t.Errorf("c refused after 7s: %+v", got)
	}
	// Misses fade: half after the half-life.
	now = now.Add(missHalfLife)
	if faded := o.get().Misses; !near(faded, outcomeWeight/2) {
		t.Errorf("misses after a half-life: %v, want %v", faded, outcomeWeight/2)
	}
	// A candidate this agent deletes unanswered once overdue (past three
	// times the answers' 3s) is a miss, and its wait counts as an answer
	// time.
	before := o.get()
	o.sent(candidateKey("ns", "d"))
	now = now.Add(10 * time.Second)
	o.deleted(candidateKey("ns", "d"))
	got = o.get()
	faded := before.Misses * math.Exp2(-10/missHalfLife.Seconds())
	if got.Ended != 3 || !near(got.Misses, faded+outcomeWeight*(1-faded)) || !near(got.AnswerSeconds, before.AnswerSeconds+outcomeWeight*(10-before.AnswerSeconds)) {
		t.Errorf("d deleted unanswered after 10s: %+v (before %+v)", got, before)
	}
	// One deleted unanswered before it was overdue lost a race: it
	// neither counts nor holds the answer time up.
	o.sent(candidateKey("ns", "quick"))
	now = now.Add(8 * time.Second)
	o.deleted(candidateKey("ns", "quick"))
	if again := o.get(); again.Ended != got.Ended || again.Waiting != 0 || again.Answer != got.Answer || again.Misses >= got.Misses {
		t.Errorf("quick deleted unanswered after 8s, the target answering in 3s: %+v, was %+v", again, got)
	}
	got = o.get()
	// Deleting one that was answered changes nothing.
	o.deleted(candidateKey("ns", "a"))
	if again := o.get(); again != got {
		t.Errorf("a deleted after its answer: %+v, was %+v", again, got)
	}
	// A candidate that never got an answer stops counting after a while.
	o.sent(candidateKey("ns", "e"))
	now = now.Add(forgetWaitingAfter)
	if got := o.get(); got.Waiting != 0 || got.Answer > 10*time.Second {
		t.Errorf("e forgotten: %+v", got)
	}
	// A candidate created by another process (not sent) is no answer.
	o.seen(reserved("x"))
	if got := o.get(); got.Ended != 3 {
		t.Errorf("x was not sent by this agent: %+v", got)
	}
}

// TestUnschedulableIsNotWaiting checks that a candidate that waited for its
// source is not taken for one that cannot run: the window of targets would
// widen step by step to every target whenever the source is slow.
func TestUnschedulableIsNotWaiting(t *testing.T) {
	condition := func(msg string) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}
	}
	noFit := "0/3 nodes are available: 3 Insufficient cpu."
	timeout := "rejected due to timeout after waiting 30s at plugin FlotillaCandidate"
	for _, tt := range []struct {
		name  string
		state string
		cond  *corev1.PodCondition
		want  string
	}{
		{"no condition", "", nil, ""},
		{"no node fits", "", ptr.To(condition(noFit)), noFit},
		{"unreserved, then no node fits", `{"phase":"Unreserved","nonce":"a1"}`, ptr.To(condition(noFit)), noFit},
		{"the Permit timed out", `{"phase":"Unreserved","nonce":"a1"}`, ptr.To(condition(timeout)), ""},
		{"reserved again after a timeout", `{"phase":"Reserved","nonce":"b2"}`, ptr.To(condition(timeout)), ""},
		{"reserved again after no fit", `{"phase":"Reserved","nonce":"b2"}`, ptr.To(condition(noFit)), ""},
		{"bound", `{"phase":"Bound","nonce":"b2"}`, ptr.To(condition(noFit)), ""},
		{"a malformed state is no report", `{"phase":`, ptr.To(condition(noFit)), noFit},
		{"turned away on the source's denial", `{"phase":"Unreserved","nonce":"a1"}`, ptr.To(condition("0/3 nodes are available: " + protocol.DeniedMessage + " (election 2): another target's candidate is elected")), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &corev1.Pod{}
			if tt.state != "" {
				c.Annotations = map[string]string{protocol.StateAnnotation: tt.state}
			}
			if tt.cond != nil {
				c.Status.Conditions = []corev1.PodCondition{*tt.cond}
			}
			if got := Unschedulable(c); got != tt.want {
				t.Errorf("Unschedulable = %q, want %q", got, tt.want)
			}
		})
	}
}

// FuzzUnschedulable: the candidate's conditions are the target's writes;
// the reason the source reports is the message of the target scheduler's
// own Unschedulable condition and nothing else.
func FuzzUnschedulable(f *testing.F) {
	f.Add(string(corev1.PodScheduled), string(corev1.ConditionFalse), corev1.PodReasonUnschedulable, "0/3 nodes are available", 1)
	f.Add(string(corev1.PodScheduled), string(corev1.ConditionTrue), corev1.PodReasonUnschedulable, "x", 2)
	f.Add("", "", "", "", 0)
	f.Add(string(corev1.PodScheduled), string(corev1.ConditionFalse), corev1.PodReasonUnschedulable, strings.Repeat("x", 1<<16), 300)
	f.Fuzz(func(t *testing.T, typ, status, reason, message string, n int) {
		n = min(max(n, 0), 64)
		pod := &corev1.Pod{}
		for i := range n {
			msg := message
			if i > 0 {
				msg = ""
			}
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
				Type: corev1.PodConditionType(typ), Status: corev1.ConditionStatus(status), Reason: reason, Message: msg,
			})
		}
		got := Unschedulable(pod)
		scheduled := typ == string(corev1.PodScheduled) && status == string(corev1.ConditionFalse) && reason == corev1.PodReasonUnschedulable
		if (n > 0 && scheduled && got != message) || ((n == 0 || !scheduled) && got != "") {
			t.Fatalf("Unschedulable of %d conditions %s=%s (%s, %q) = %q", n, typ, status, reason, message, got)
		}
	})
}

// TestOutcomesOfASilentTarget: a target that never answered misses every
// candidate this agent deletes, however soon (it is not judged against
// answers it never gave), and keeps missing them: the waits of deleted
// candidates are no answers to judge the next ones by.
func TestOutcomesOfASilentTarget(t *testing.T) {
	now := time.Unix(1000, 0)
	o := newOutcomes()
	o.now = func() time.Time { return now }
	for i, wait := range []time.Duration{3 * time.Second, 100 * time.Millisecond, time.Second, 200 * time.Millisecond} {
		key := candidateKey("ns", fmt.Sprint(i))
		o.sent(key)
		now = now.Add(wait)
		o.deleted(key)
		if got := o.get(); got.Ended != i+1 || got.Misses < 0.5 {
			t.Fatalf("candidate %d deleted unanswered after %s by a target that never answered: %+v", i, wait, got)
		}
	}
}

// TestABusyTargetIsNotSlow: a candidate left waiting raises its target's
// answer time only while the target answers nothing else; one that keeps
// answering others keeps its answer time (a lost answer made a target
// unsure for a whole burst), and one that stops answering loses it.
func TestABusyTargetIsNotSlow(t *testing.T) {
	now := time.Unix(1000, 0)
	o := newOutcomes()
	o.now = func() time.Time { return now }
	reserved := func(name string) *corev1.Pod {
		c := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		c.Annotations = map[string]string{protocol.StateAnnotation: `{"phase":"Reserved","nonce":"n"}`}
		return c
	}
	o.sent(candidateKey("ns", "stuck"))
	for i := range 20 {
		name := fmt.Sprintf("quick-%d", i)
		o.sent(candidateKey("ns", name))
		now = now.Add(500 * time.Millisecond)
		o.seen(reserved(name))
	}
	got := o.get()
	if got.Waiting != 1 || got.Answer != got.Answered || got.Answer != 500*time.Millisecond {
		t.Errorf("answering others in 0.5s while one waits 10s: answer %s (answers %s), want the answers' 0.5s; %+v", got.Answer, got.Answered, got)
	}
	now = now.Add(5 * time.Second)
	if got := o.get(); got.Answer != 5*time.Second {
		t.Errorf("silent for 5s since its last answer: answer %s, want 5s", got.Answer)
	}
}
