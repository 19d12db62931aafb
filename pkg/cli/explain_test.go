package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func candidateWith(state string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0123456789", Annotations: map[string]string{}}}
	if state != "" {
		p.Annotations[protocol.StateAnnotation] = state
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func unschedulable(msg string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg,
		})
	}
}

// TestOverdueBarIsTheAgents: explain keeps its own copy of the agent's
// overdue bar so that the plugin does not build the agent in.
func TestOverdueBarIsTheAgents(t *testing.T) {
	if overdueAfter != candidate.OverdueAfter || overdueConfirm != candidate.OverdueConfirm {
		t.Errorf("explain's overdue bar %s + %s, the agent's %s + %s", overdueAfter, overdueConfirm, candidate.OverdueAfter, candidate.OverdueConfirm)
	}
}

func TestAnswerFor(t *testing.T) {
	ready := &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Connected"}
	t1 := targetInfo{name: "t1", kind: "ClusterTarget", ready: ready, virtualNode: "flotilla-t1", namespaces: []string{"shop"}}
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	elected := protocol.Election{Generation: 1, Target: "t1", Nonce: "n1"}

	for _, tc := range []struct {
		name   string
		target targetInfo
		pod    *corev1.Pod
		el     protocol.Election
		cand   *corev1.Pod
		err    error
		want   Answer
	}{
		{
			name: "bound", target: t1, pod: pending, el: elected,
			cand: candidateWith(`{"phase":"Bound","nonce":"n1","node":"n-1"}`, func(p *corev1.Pod) { p.Spec.NodeName = "n-1" }),
			want: Answer{Answer: AnswerBound, Node: "n-1", Elected: true},
		},
		{
			name: "reserved, waiting for the election", target: t1, pod: pending,
			cand: candidateWith(`{"phase":"Reserved","nonce":"n1","node":"n-2","score":87}`, nil),
			want: Answer{Answer: AnswerReserved, Node: "n-2", Score: ptr.To[int64](87), Reason: "waiting in Permit for the source's election"},
		},
		{
			name: "reserved and allowed", target: t1, pod: pending, el: elected,
			cand: candidateWith(`{"phase":"Reserved","nonce":"n1","node":"n-2"}`, func(p *corev1.Pod) { p.Annotations[protocol.AllowedAnnotation] = "uid/1/n1" }),
			want: Answer{Answer: AnswerReserved, Node: "n-2", Score: ptr.To[int64](0), Reason: "allowed to bind: the source elected it", Elected: true},
		},
		{
			name: "pinned to a domain", target: t1, pod: pending,
			cand: candidateWith("", func(p *corev1.Pod) { p.Annotations[protocol.DomainAnnotation] = `["eu","eu-1a"]` }),
			want: Answer{Answer: AnswerWaiting, Domain: "eu/eu-1a", Reason: "the target's scheduler has not reported on it yet"},
		},
		{
			name: "an unreadable pin", target: t1, pod: pending,
			cand: candidateWith("", func(p *corev1.Pod) { p.Annotations[protocol.DomainAnnotation] = `{"zone":"eu-1a"}` }),
			want: Answer{Answer: AnswerWaiting, Reason: "the target's scheduler has not reported on it yet"},
		},
		{
			name: "waiting past the agent's least overdue bar", target: t1, pod: pending,
			cand: candidateWith("", func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute)) }),
			want: Answer{Answer: AnswerWaiting, Overdue: true, Reason: "the target's scheduler has not reported on it yet; unanswered for 1m0s: overdue once the target has answered none of the agent's candidates for as long (3 times its answer time, at least 3s, and 2s more)"},
		},
		{
			name: "waiting within it", target: t1, pod: pending,
			cand: candidateWith("", func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(time.Now().Add(-4 * time.Second)) }),
			want: Answer{Answer: AnswerWaiting, Reason: "the target's scheduler has not reported on it yet"},
		},
		{
			name: "unschedulable", target: t1, pod: pending,
			cand: candidateWith("", unschedulable("0/1 nodes are available: 1 Insufficient cpu.")),
			want: Answer{Answer: AnswerUnschedulable, Reason: "0/1 nodes are available: 1 Insufficient cpu."},
		},
		{
			name: "unschedulable after a reservation ended", target: t1, pod: pending,
			cand: candidateWith(`{"phase":"Unreserved","nonce":"n1","reason":"Permit timed out"}`, unschedulable("0/1 nodes are available: 1 Insufficient cpu.")),
			want: Answer{Answer: AnswerUnschedulable, Reason: "0/1 nodes are available: 1 Insufficient cpu.; an earlier reservation ended: Permit timed out"},
		},
		{
			name: "unreserved", target: t1, pod: pending,
			cand: candidateWith(`{"phase":"Unreserved","nonce":"n1","reason":"denied by the source"}`, nil),
			want: Answer{Answer: AnswerUnreserved, Reason: "denied by the source"},
		},
		{
			name: "not scheduled yet, malformed state", target: t1, pod: pending,
			cand: candidateWith(`nonsense`, nil),
			want: Answer{Answer: AnswerWaiting, Reason: `the target's scheduler has not reported on it yet; malformed multicluster.flotilla.dev/state annotation "nonsense"`},
		},
		{
			name: "unreachable", target: t1, pod: pending, err: errors.New("dial tcp: connection refused"),
			want: Answer{Answer: AnswerUnreachable, Reason: "dial tcp: connection refused"},
		},
		{
			name: "not invited, as the agent told the pod", target: t1, pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
				Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
					Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: protocol.ReasonNotInvited,
					Message: "Skipped: target t0 does not invite this cluster into namespace shop; target t1 does not invite this cluster into namespace shop",
				}}},
			},
			err:  errors.New("forbidden"),
			want: Answer{Answer: AnswerNoCandidate, Reason: "NotInvited: target t1 does not invite this cluster into namespace shop"},
		},
		{
			name: "not invited, among the reasons no target can run the pod", target: t1, pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
				Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
					Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
					Message: "0/3 targets can run the pod: t0: 0/4 nodes are available: 4 Insufficient cpu.; target t1 does not invite this cluster into namespace shop",
				}}},
			},
			err:  errors.New("forbidden"),
			want: Answer{Answer: AnswerNoCandidate, Reason: "NotInvited: target t1 does not invite this cluster into namespace shop"},
		},
		{
			name: "namespace not covered by the invitation", target: t1,
			pod:  &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "private", Name: "web"}},
			want: Answer{Answer: AnswerNoCandidate, Reason: "the target's invitation does not cover namespace private"},
		},
		{
			name: "target not Ready",
			target: targetInfo{name: "t1", kind: "ClusterTarget", virtualNode: "flotilla-t1",
				ready: &metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Unauthorized", Message: "token\nexpired"}},
			pod: pending, err: errors.New("401"),
			want: Answer{Answer: AnswerNoCandidate, Reason: "the target is not Ready (Unauthorized): token expired"},
		},
		{
			name: "runs elsewhere", target: t1,
			pod:  &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: corev1.PodSpec{NodeName: "flotilla-t2"}},
			want: Answer{Answer: AnswerNoCandidate, Reason: "the pod runs on flotilla-t2: its other candidates were deleted"},
		},
		{
			name: "none yet", target: t1, pod: pending,
			want: Answer{Answer: AnswerNoCandidate, Reason: "the agent has not sent a candidate there (yet): a pod's candidates go to a few targets first (the agent's placement.maxCandidates, 2 by default), drawn by their room, speed and misses; or it deleted it"},
		},
		{
			name: "mapped namespace",
			target: targetInfo{name: "t1", kind: "ClusterTarget", ready: ready, virtualNode: "flotilla-t1",
				mapping: map[string]string{"shop": "shop-c1"}, namespaces: []string{"shop-c1"}},
			pod:  pending,
			want: Answer{Answer: AnswerNoCandidate, Namespace: "shop-c1", Reason: "the agent has not sent a candidate there (yet): a pod's candidates go to a few targets first (the agent's placement.maxCandidates, 2 by default), drawn by their room, speed and misses; or it deleted it"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := answerFor(tc.target, tc.pod, tc.el, tc.cand, tc.err)
			want := tc.want
			want.Target, want.Kind = tc.target.name, tc.target.kind
			if want.Namespace == "" {
				want.Namespace = tc.pod.Namespace
			}
			if tc.cand != nil {
				want.Candidate = tc.cand.Name
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestSummarizeEvents(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(time.Unix(1000+int64(s), 0)) }
	events := []corev1.Event{
		{Reason: "c", LastTimestamp: at(3)},
		{Reason: "a", EventTime: metav1.NewMicroTime(at(1).Time)},
		{Reason: "d", Series: &corev1.EventSeries{LastObservedTime: metav1.NewMicroTime(at(4).Time)}, EventTime: metav1.NewMicroTime(at(0).Time)},
		{Reason: "b", ObjectMeta: metav1.ObjectMeta{CreationTimestamp: at(2)}},
	}
	var got []string
	for _, e := range summarizeEvents(events, 3) {
		got = append(got, e.Reason)
	}
	if diff := cmp.Diff([]string{"b", "c", "d"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWriteExplanation(t *testing.T) {
	now := time.Unix(2000, 0)
	e := &Explanation{
		Pod: "shop/huge", UID: "u1", Phase: "Pending", SourcePod: true,
		Election: &ElectionRecord{},
		Targets:  []Answer{{Target: "tgt", Kind: "ClusterTarget", Answer: AnswerUnschedulable, Reason: "0/1 nodes are available: 1 Insufficient cpu."}},
		Events:   []EventSummary{{Type: "Warning", Reason: "NoTargetAvailable", Message: "No target can run this pod", Count: 3, LastSeen: now.Add(-5 * time.Second)}},
	}
	var buf bytes.Buffer
	if err := writeExplanation(&buf, e, "text", now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shop/huge", "Election:  none yet", "tgt", "Unschedulable", "Insufficient cpu", "NoTargetAvailable (x3)", "5s"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestWriteExplanationOfAPreElection: a pre-election is told as one, not
// as the election of a reservation named "*".
func TestWriteExplanationOfAPreElection(t *testing.T) {
	e := &Explanation{
		Pod: "shop/web-2", UID: "u2", Phase: "Pending", SourcePod: true,
		Election: &ElectionRecord{Generation: 1, Target: "tgt", Nonce: protocol.AnyReservation},
		Targets:  []Answer{{Target: "tgt", Kind: "ClusterTarget", Answer: AnswerWaiting, Elected: true}},
	}
	var buf bytes.Buffer
	if err := writeExplanation(&buf, e, "text", time.Unix(2000, 0)); err != nil {
		t.Fatal(err)
	}
	if want := "Election:  generation 1, target tgt pre-elected"; !strings.Contains(buf.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, buf.String())
	}
}

func TestWriteExplanationOfAPodKeptHome(t *testing.T) {
	e := &Explanation{Pod: "shop/web-1", UID: "u1", Phase: "Running", Local: true, Node: "n1"}
	var buf bytes.Buffer
	if err := writeExplanation(&buf, e, "text", time.Unix(2000, 0)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shop/web-1 stayed in this cluster", "localFirst", "node n1"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, buf.String())
		}
	}
}
