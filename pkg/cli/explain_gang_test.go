package cli

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestGangMemberOf: explain counts a member as the agent's gang does: the
// target it runs in, else the elected target that reports its
// reservation, else the reservations a placement policy does not exclude.
func TestGangMemberOf(t *testing.T) {
	targets := []targetInfo{{name: "c2", virtualNode: "flotilla-c2"}, {name: "c3", virtualNode: "flotilla-c3"}}
	pod := func(node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}, Spec: corev1.PodSpec{NodeName: node}}
	}
	elected := protocol.Election{Generation: 1, Target: "c3", Nonce: "n"}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		el       protocol.Election
		answers  []Answer
		placed   string
		bound    bool
		reserved string
	}{
		{"runs in a target", pod("flotilla-c2"), elected, nil, "c2", true, ""},
		{"elected, its reservation reported", pod(""), elected, []Answer{{Target: "c2", Answer: AnswerReserved}, {Target: "c3", Answer: AnswerReserved, Elected: true}}, "c3", false, ""},
		{"elected, its reservation gone", pod(""), elected, []Answer{{Target: "c2", Answer: AnswerReserved}, {Target: "c3", Answer: AnswerWaiting, Elected: true}}, "", false, "c2"},
		{"an excluded reservation does not count", pod(""), protocol.Election{}, []Answer{{Target: "c2", Answer: AnswerReserved, Policy: "excluded: spread"}, {Target: "c3", Answer: AnswerReserved}}, "", false, "c3"},
		{"not asked: its election only", pod(""), elected, nil, "c3", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := gangMemberOf(tc.pod, tc.el, targets, tc.answers)
			if m.Placed != tc.placed || m.Bound != tc.bound || strings.Join(m.Reserved, ",") != tc.reserved {
				t.Fatalf("member %+v, want placed %q bound %v reserved %q", m, tc.placed, tc.bound, tc.reserved)
			}
		})
	}
}

func TestWriteGang(t *testing.T) {
	var b bytes.Buffer
	writeGang(&b, &GangExplanation{Name: "big", MinMember: 8, Mode: "oneCluster", Members: make([]GangMember, 8), Asked: true,
		Missing: "no target holds places for 8 members of pod group big at once", Reservations: map[string]int{"c3": 4, "c2": 4}})
	want := "Gang:      pod group big, 8 members needed at once, oneCluster; waiting: no target holds places for 8 members of pod group big at once\n" +
		"           8 members, 0 placed; other reservations held: c2 4, c3 4\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
