package reservation

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func TestElectionsInFlight(t *testing.T) {
	created := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	pod := func(name, election, node string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: created,
				Annotations: map[string]string{protocol.SourceSpecAnnotation: "{}"}},
			Spec: corev1.PodSpec{SchedulerName: protocol.SourceSchedulerName, NodeName: node},
		}
		if election != "" {
			p.Annotations[protocol.ElectionAnnotation] = election
		}
		return p
	}
	notSource := pod("not-source", "1/c2/n1", "")
	notSource.Spec.SchedulerName = "default-scheduler"
	pods := []*corev1.Pod{
		pod("waiting-b", "1/c2/n2", ""),
		pod("waiting-a", "3/ns2/t/n1", ""),
		pod("bound", "1/c2/n3", "flotilla-c2"),
		pod("withdrawn", "2//", ""),
		pod("fresh", "", ""),
		pod("broken", "garbage", ""),
		notSource,
	}
	candidates := map[string]*corev1.Pod{
		"waiting-a": {
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
				protocol.StateAnnotation:   `{"phase":"Reserved","nonce":"n1","node":"node-7"}`,
				protocol.AllowedAnnotation: protocol.Allowance{SourceUID: "uid-waiting-a", Generation: 3, Nonce: "n1"}.Encode(),
			}},
		},
		"waiting-b": {
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
				protocol.StateAnnotation: `{"phase":"Reserved","nonce":"n2","node":"node-1"}`,
				// An allowance of an earlier election is not this one's.
				protocol.AllowedAnnotation: protocol.Allowance{SourceUID: "uid-waiting-b", Generation: 0, Nonce: "n0"}.Encode(),
			}},
		},
	}
	var asked []string
	l := ElectionsInFlight(pods, func(p *corev1.Pod, target string) *corev1.Pod {
		asked = append(asked, p.Name+"@"+target)
		return candidates[p.Name]
	}, 0)

	if l.Total != 3 || l.Omitted != 0 || len(l.Items) != 3 {
		t.Fatalf("got %d of %d elections in flight: %+v; want broken, waiting-a, waiting-b", len(l.Items), l.Total, l.Items)
	}
	if l.Items[0].Pod != "ns/broken" || l.Items[1].Pod != "ns/waiting-a" || l.Items[2].Pod != "ns/waiting-b" {
		t.Errorf("order %s, %s, %s; want by namespace/name", l.Items[0].Pod, l.Items[1].Pod, l.Items[2].Pod)
	}
	if b := l.Items[0]; b.Error == "" || b.Election != "garbage" || b.Candidate != nil {
		t.Errorf("a malformed record is shown with its error: %+v", b)
	}
	a := l.Items[1]
	if a.Target != "ns2/t" || a.Generation != 3 || a.Nonce != "n1" || !a.Created.Equal(created.Time) || a.UID != "uid-waiting-a" {
		t.Errorf("election of waiting-a shown as %+v", a)
	}
	if a.Candidate == nil || !a.Candidate.Allowed || a.Candidate.Phase != protocol.PhaseReserved || a.Candidate.Node != "node-7" {
		t.Errorf("elected candidate of waiting-a shown as %+v, want Reserved on node-7, allowed", a.Candidate)
	}
	if c := l.Items[2].Candidate; c == nil || c.Allowed {
		t.Errorf("waiting-b's candidate holds an earlier election's allowance, shown as %+v", c)
	}
	if len(asked) != 2 {
		t.Errorf("candidates looked up for %v; only the parsed elections in flight need one", asked)
	}

	capped := ElectionsInFlight(pods, func(*corev1.Pod, string) *corev1.Pod { return nil }, 1)
	if capped.Total != 3 || capped.Omitted != 2 || len(capped.Items) != 1 || capped.Items[0].Pod != "ns/broken" {
		t.Errorf("limit 1: %+v", capped)
	}
}
