package reservation

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/gang"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestGangGate: a gang member is elected only where its gang sends it, and
// is allowed to bind only once its gang lets it, whatever the scores say.
// It goes through decide, the function the controller calls.
func TestGangGate(t *testing.T) {
	elected := protocol.Election{Generation: 2, Target: "t1", Nonce: "n1"}
	for _, tc := range []struct {
		name      string
		election  protocol.Election
		observed  []Observed
		gate      *GangGate
		wantElect string
		wantAllow bool
	}{
		{
			name:      "no gang: the best reservation is elected and allowed",
			observed:  []Observed{reserved("t1", "n1", 90), reserved("t2", "n2", 10)},
			wantElect: "t1", wantAllow: true,
		},
		{
			name:     "gang incomplete: nothing is elected",
			observed: []Observed{reserved("t1", "n1", 90), reserved("t2", "n2", 10)},
			gate:     &GangGate{Why: "2 of the 4 members hold a place"},
		},
		{
			name:      "gang complete elsewhere: the gang's target, not the best score",
			observed:  []Observed{reserved("t1", "n1", 90), reserved("t2", "n2", 10)},
			gate:      &GangGate{Target: "t2"},
			wantElect: "t2",
		},
		{
			name:      "gang complete, others not elected yet: elected, not allowed",
			observed:  []Observed{reserved("t1", "n1", 90)},
			gate:      &GangGate{Target: "t1"},
			wantElect: "t1",
		},
		{
			name:     "elected, the gang not yet placed: no allowance",
			election: elected,
			observed: []Observed{reserved("t1", "n1", 90)},
			gate:     &GangGate{Target: "t1"},
		},
		{
			name:      "the election that completes the gang: elected and allowed in one round",
			observed:  []Observed{reserved("t1", "n1", 90)},
			gate:      &GangGate{Target: "t1", Allow: true},
			wantElect: "t1", wantAllow: true,
		},
		{
			name:      "elected, the gang placed: allowed",
			election:  elected,
			observed:  []Observed{reserved("t1", "n1", 90)},
			gate:      &GangGate{Target: "t1", Allow: true},
			wantAllow: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(Input{SourceUID: uid, Election: tc.election, Observed: tc.observed, Gang: tc.gate})
			got := ""
			if d.Elects() {
				got = d.Elect.Target
			}
			if got != tc.wantElect {
				t.Fatalf("elected %q, want %q", got, tc.wantElect)
			}
			if (d.Allow != nil) != tc.wantAllow {
				t.Fatalf("allowance %+v, want one: %v", d.Allow, tc.wantAllow)
			}
		})
	}
}

// TestGangMember: a member counts as placed only on the reservation its
// election names (a reservation that ended does not hold its place), and
// holds the others it may be elected on; its election stands whatever
// became of the reservation it named.
func TestGangMember(t *testing.T) {
	e := protocol.Election{Generation: 1, Target: "t1", Nonce: "n1"}
	for _, tc := range []struct {
		name     string
		election protocol.Election
		observed []Observed
		want     gang.Member
	}{
		{"reserved in two", protocol.Election{}, []Observed{reserved("t1", "n1", 1), reserved("t2", "n2", 1)}, gang.Member{Name: "m", Reserved: []string{"t1", "t2"}}},
		{"elected on its reservation", e, []Observed{reserved("t1", "n1", 1), reserved("t2", "n2", 1)}, gang.Member{Name: "m", Placed: "t1", Elected: "t1"}},
		{"elected, its target reserved anew", e, []Observed{reserved("t1", "n9", 1)}, gang.Member{Name: "m", Reserved: []string{"t1"}, Elected: "t1"}},
		{"elected, its reservation ended", e, []Observed{unreserved("t1", "n1"), reserved("t2", "n2", 1)}, gang.Member{Name: "m", Reserved: []string{"t2"}, Elected: "t1"}},
		{"bound on its election", e, []Observed{bound("t1", "n1", 1)}, gang.Member{Name: "m", Placed: "t1", Bound: true, Elected: "t1"}},
		{"an excluded reservation does not count", protocol.Election{}, []Observed{{Target: "t1", Exists: true, State: protocol.State{Phase: protocol.PhaseReserved, Nonce: "n1"}, Excluded: "spread"}}, gang.Member{Name: "m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := gangMember("m", tc.election, "", tc.observed)
			if got.Name != tc.want.Name || got.Placed != tc.want.Placed || got.Bound != tc.want.Bound || got.Elected != tc.want.Elected || len(got.Reserved) != len(tc.want.Reserved) {
				t.Fatalf("gangMember = %+v, want %+v", got, tc.want)
			}
			for i := range got.Reserved {
				if got.Reserved[i] != tc.want.Reserved[i] {
					t.Fatalf("gangMember = %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}

// TestRoundHoldsEveryLock: a gang member under a spread holds its gang's
// lock and its workload's; taking the second must not lose the first's
// release (its gang would wait for ever).
func TestRoundHoldsEveryLock(t *testing.T) {
	var locks workloadLocks
	r := &round{unlock: func() {}}
	r.hold(locks.lock("gang:ns/g"))
	r.hold(locks.lock("ns/ReplicaSet/w"))
	r.unlock()
	if len(locks.locks) != 0 {
		t.Fatalf("locks still held after the round released its own: %v", locks.locks)
	}
}

// TestGangCounts: a member deleted or ended (failed, or succeeded: a
// finished run's) holds no place of its gang; one pending or running does.
func TestGangCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"pending", corev1.Pod{}, true},
		{"running", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, true},
		{"succeeded", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false},
		{"failed", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, false},
		{"deleted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{}}}, false},
	} {
		if got := gangCounts(&tc.pod); got != tc.want {
			t.Errorf("%s: counts %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAllowsOnceElected: the member whose election completes its gang's
// places is allowed with it; one whose election leaves the gang short is
// not, nor one elected outside a oneCluster gang's target.
func TestAllowsOnceElected(t *testing.T) {
	spec := gang.Spec{Name: "g", MinMember: 3, Mode: gang.OneCluster}
	members := []gang.Member{
		{Name: "a", Placed: "t1"},
		{Name: "b", Placed: "t1"},
		{Name: "c", Reserved: []string{"t1", "t2"}},
		{Name: "d", Reserved: []string{"t1"}},
	}
	if !allowsOnceElected(spec, members, "c", "t1", "") {
		t.Error("c, the third elected in t1, is not allowed with its election")
	}
	if allowsOnceElected(spec, members, "c", "t2", "") {
		t.Error("c, elected outside the gang's target, is allowed")
	}
	if allowsOnceElected(gang.Spec{Name: "g", MinMember: 4, Mode: gang.OneCluster}, members, "c", "t1", "") {
		t.Error("c is allowed though the gang of four would still be one short")
	}
}
