package core

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// quotaPod is a candidate of cluster in namespace requesting cpu.
func quotaPod(name, cluster, namespace, cpu string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: cluster},
		},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("1Gi")},
		}}}},
	}
}

func withState(pod *v1.Pod, phase protocol.Phase, nonce string) *v1.Pod {
	pod = pod.DeepCopy()
	raw, _ := json.Marshal(protocol.State{Phase: phase, Nonce: nonce})
	pod.Annotations = map[string]string{protocol.StateAnnotation: string(raw)}
	return pod
}

func withNode(pod *v1.Pod) *v1.Pod {
	pod = pod.DeepCopy()
	pod.Spec.NodeName = "node-1"
	return pod
}

func withPhase(pod *v1.Pod, phase v1.PodPhase) *v1.Pod {
	pod = pod.DeepCopy()
	pod.Status.Phase = phase
	return pod
}

func limit(v int64) *int64 { return &v }

// inShop is an invitation of cluster c1 into namespace shop with quota q.
func inShop(q Quota) Invitation {
	return Invitation{Name: "Source shop/c1", Cluster: "c1", Quota: q, Covers: func(ns string) bool { return ns == "shop" }}
}

func TestLedger(t *testing.T) {
	a := quotaPod("a", "c1", "shop", "500m")
	b := quotaPod("b", "c1", "shop", "500m")
	c := quotaPod("c", "c1", "shop", "500m")
	cpu1 := []Invitation{inShop(Quota{CPU: limit(1000)})}
	type step func(l *Ledger)
	reserve := func(p *v1.Pod) step { return func(l *Ledger) { l.Reserve(p, "n") } }
	reserveNonce := func(p *v1.Pod, nonce string) step { return func(l *Ledger) { l.Reserve(p, nonce) } }
	unreserve := func(p *v1.Pod) step { return func(l *Ledger) { l.Unreserve(p) } }
	bound := func(p *v1.Pod) step { return func(l *Ledger) { l.Bound(p) } }
	observe := func(p *v1.Pod) step { return func(l *Ledger) { l.Observe(p) } }
	forget := func(p *v1.Pod) step { return func(l *Ledger) { l.Forget(p.UID) } }
	retrying := func(p *v1.Pod) step { return func(l *Ledger) { l.Retrying(p) } }

	tests := []struct {
		name        string
		steps       []step
		invitations []Invitation
		admit       *v1.Pod
		wantUsed    int64 // millicores of c1 in shop
		wantRefused bool
	}{
		{name: "empty: fits", invitations: cpu1, admit: c, wantUsed: 0},
		{name: "two reserved fill the quota", steps: []step{reserve(a), reserve(b)}, invitations: cpu1, admit: c, wantUsed: 1000, wantRefused: true},
		{name: "unreserve frees", steps: []step{reserve(a), reserve(b), unreserve(b)}, invitations: cpu1, admit: c, wantUsed: 500},
		{name: "the candidate itself is not counted twice", steps: []step{reserve(a), observe(withState(c, protocol.PhaseReserved, "old"))}, invitations: cpu1, admit: c, wantUsed: 1000},
		{name: "bound counts until it ends", steps: []step{reserve(a), bound(a), reserve(b), bound(b), observe(withNode(a))}, invitations: cpu1, admit: c, wantUsed: 1000, wantRefused: true},
		{name: "a stale copy without node does not undo a binding", steps: []step{reserve(a), bound(a), observe(a)}, invitations: cpu1, admit: c, wantUsed: 500},
		{name: "ended frees", steps: []step{reserve(a), bound(a), reserve(b), bound(b), observe(withPhase(withNode(a), v1.PodSucceeded))}, invitations: cpu1, admit: c, wantUsed: 500},
		{name: "failed frees", steps: []step{observe(withNode(a)), observe(withNode(b)), observe(withPhase(withNode(b), v1.PodFailed))}, invitations: cpu1, admit: c, wantUsed: 500},
		{name: "deleted frees", steps: []step{reserve(a), bound(a), reserve(b), forget(b)}, invitations: cpu1, admit: c, wantUsed: 500},
		{
			name:        "restart: bound and in-flight pods count",
			steps:       []step{observe(withNode(a)), observe(withState(b, protocol.PhaseReserved, "n1"))},
			invitations: cpu1, admit: c, wantUsed: 1000, wantRefused: true,
		},
		{
			name:        "restart: unreserved and pending pods do not count",
			steps:       []step{observe(withState(a, protocol.PhaseUnreserved, "n1")), observe(b)},
			invitations: cpu1, admit: c, wantUsed: 0,
		},
		{
			name:        "restart: an in-flight pod being scheduled again is over",
			steps:       []step{observe(withNode(a)), observe(withState(b, protocol.PhaseReserved, "n1")), retrying(withState(b, protocol.PhaseReserved, "n1"))},
			invitations: cpu1, admit: c, wantUsed: 500,
		},
		{
			name:        "restart: the in-flight reservation lands as Unreserved",
			steps:       []step{observe(withState(b, protocol.PhaseReserved, "n1")), observe(withState(b, protocol.PhaseUnreserved, "n1"))},
			invitations: cpu1, admit: c, wantUsed: 0,
		},
		{
			name:        "own Reserved report seen after Unreserve does not count",
			steps:       []step{reserveNonce(b, "n2"), observe(withState(b, protocol.PhaseReserved, "n2")), unreserve(b), observe(withState(b, protocol.PhaseReserved, "n2"))},
			invitations: cpu1, admit: c, wantUsed: 0,
		},
		{
			name:        "a new reservation after a superseded one counts",
			steps:       []step{observe(withState(b, protocol.PhaseReserved, "n1")), retrying(withState(b, protocol.PhaseReserved, "n1")), observe(withState(b, protocol.PhaseReserved, "n2"))},
			invitations: cpu1, admit: c, wantUsed: 500,
		},
		{name: "quota raised", steps: []step{reserve(a), reserve(b)}, invitations: []Invitation{inShop(Quota{CPU: limit(2000)})}, admit: c, wantUsed: 1000},
		{name: "quota lowered below usage refuses, evicts nothing", steps: []step{reserve(a), bound(a), reserve(b), bound(b)}, invitations: []Invitation{inShop(Quota{CPU: limit(500)})}, admit: c, wantUsed: 1000, wantRefused: true},
		{name: "no quota: anything fits", steps: []step{reserve(a), reserve(b)}, invitations: []Invitation{inShop(Quota{})}, admit: c, wantUsed: 1000},
		{name: "pods quota", steps: []step{reserve(a), reserve(b)}, invitations: []Invitation{inShop(Quota{Pods: limit(2)})}, admit: c, wantUsed: 1000, wantRefused: true},
		{name: "memory quota", steps: []step{reserve(a)}, invitations: []Invitation{inShop(Quota{Memory: limit(1 << 30)})}, admit: c, wantUsed: 500, wantRefused: true},
		{
			name:        "another cluster's pods do not count",
			steps:       []step{reserve(quotaPod("x", "c2", "shop", "1")), reserve(quotaPod("y", "c2", "shop", "1"))},
			invitations: cpu1, admit: c, wantUsed: 0,
		},
		{
			name:        "another namespace's pods do not count for a Source",
			steps:       []step{reserve(quotaPod("x", "c1", "other", "1"))},
			invitations: cpu1, admit: c, wantUsed: 0,
		},
		{
			name:  "a ClusterSource counts every namespace it covers",
			steps: []step{reserve(quotaPod("x", "c1", "other", "600m"))},
			invitations: []Invitation{{Name: "ClusterSource c1", Cluster: "c1", Quota: Quota{CPU: limit(1000)}, Covers: func(ns string) bool {
				return ns == "shop" || ns == "other"
			}}},
			admit: c, wantUsed: 0, wantRefused: true,
		},
		{
			name:        "every invitation that covers the candidate applies",
			steps:       []step{reserve(a)},
			invitations: []Invitation{inShop(Quota{CPU: limit(4000)}), {Name: "ClusterSource c1", Cluster: "c1", Quota: Quota{CPU: limit(900)}, Covers: func(string) bool { return true }}},
			admit:       c, wantUsed: 500, wantRefused: true,
		},
		{name: "a pod that is not a candidate is never refused", steps: []step{reserve(a), reserve(b)}, invitations: cpu1, admit: &v1.Pod{}, wantUsed: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLedger()
			for _, s := range tt.steps {
				s(l)
			}
			if got := l.Usage("c1", func(ns string) bool { return ns == "shop" }, "").CPU; got != tt.wantUsed {
				t.Errorf("c1 uses %dm in shop, want %dm", got, tt.wantUsed)
			}
			reason := l.Admit(tt.admit, tt.invitations)
			if (reason != "") != tt.wantRefused {
				t.Fatalf("Admit = %q, want refused %v", reason, tt.wantRefused)
			}
			if tt.wantRefused && !strings.Contains(reason, "quota") {
				t.Errorf("reason %q does not name the quota", reason)
			}
		})
	}
}

// TestLedgerRetry checks that a candidate refused for a quota is handed
// back for a retry when its cluster's usage drops, and only then.
func TestLedgerRetry(t *testing.T) {
	a := quotaPod("a", "c1", "shop", "500m")
	c := quotaPod("c", "c1", "shop", "600m")
	other := quotaPod("x", "c2", "shop", "500m")
	cpu1 := []Invitation{inShop(Quota{CPU: limit(1000)})}
	l := NewLedger()
	l.Reserve(a, "n")
	l.Reserve(other, "n")
	if reason := l.Admit(c, cpu1); reason == "" {
		t.Fatal("c fits beside a: want refused")
	}
	if got := l.Forget(other.UID); len(got) != 0 {
		t.Errorf("another cluster's pod freed usage: retried %d of c1's candidates", len(got))
	}
	if got := l.Observe(withState(a, protocol.PhaseReserved, "n")); len(got) != 0 {
		t.Errorf("a report that frees nothing retried %d candidates", len(got))
	}
	got := l.Unreserve(a)
	if len(got) != 1 || got[0].UID != c.UID {
		t.Fatalf("Unreserve retried %v, want c", got)
	}
	if got := l.Waiting("c1"); len(got) != 0 {
		t.Errorf("c was retried once already, still waiting: %v", got)
	}
	l.Reserve(a, "n")
	l.Admit(c, cpu1)
	if got := l.Waiting("c1"); len(got) != 1 {
		t.Errorf("a quota change retries %d of c1's candidates, want 1", len(got))
	}
	l.Admit(c, cpu1)
	l.Forget(c.UID)
	if got := l.Waiting("c1"); len(got) != 0 {
		t.Errorf("a deleted candidate is retried: %v", got)
	}
	l.Defer(c)
	l.Defer(other)
	if got := l.Waiting(""); len(got) != 2 {
		t.Errorf("deferred candidates retried: %d, want 2", len(got))
	}
}

func TestQuotaOver(t *testing.T) {
	q := Quota{CPU: limit(2000), Memory: limit(1 << 30), Pods: limit(4)}
	if over := q.Over(Amounts{CPU: 2000, Memory: 1 << 30, Pods: 4}); len(over) != 0 {
		t.Errorf("usage equal to the quota is over: %v", over)
	}
	over := q.Over(Amounts{CPU: 2500, Memory: 2 << 30, Pods: 5})
	want := []string{"cpu 2500m of 2", "memory 2Gi of 1Gi", "pods 5 of 4"}
	if strings.Join(over, "|") != strings.Join(want, "|") {
		t.Errorf("Over = %q, want %q", over, want)
	}
}
