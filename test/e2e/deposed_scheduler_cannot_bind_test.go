package e2e

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestADeposedSchedulerCannotBind runs two replicas of the release's
// scheduler and freezes the leader (SIGSTOP) while it holds a candidate in
// Permit. The source (played by hand, as in TestPlugin, so that the
// allowance arrives exactly while the leader is frozen) allows that
// reservation; the other replica takes the Lease and reports the
// reservation lost, or replaces it with its own. Then the old leader
// resumes (SIGCONT) and, until it notices it lost the Lease and exits,
// holds an allowed reservation in Permit: it must not bind it. The
// candidate ends bound exactly once, by the new leader's reservation, and
// no version of it is ever bound by the old one.
func TestADeposedSchedulerCannotBind(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		// A short lease, so that a frozen leader is replaced in seconds,
		// well within Permit's 30 s: the old leader still holds its
		// reservation when it resumes.
		{Name: "t1", Nodes: []sandbox.NodeSpec{{CPU: "4"}}, ReleaseSet: []string{
			"scheduler.verbosity=3",
			"scheduler.leaderElection.leaseDuration=4s",
			"scheduler.leaderElection.renewDeadline=3s",
			"scheduler.leaderElection.retryPeriod=1s",
		}},
	}})
	ctx := t.Context()
	c := s.Cluster("t1")
	client := c.Client()
	leases := client.CoordinationV1().Leases(sandbox.ReleaseNamespace)
	holder := func() string {
		l, err := leases.Get(ctx, "flotilla-scheduler", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	var leader string
	waitFor(t, 60*time.Second, "the first replica holding the scheduler's Lease", func() (bool, string) {
		leader = holder()
		return leader != "", "no holder"
	})
	standby, err := c.StartSchedulerReplica(ctx, "flotilla-scheduler-2")
	if err != nil {
		t.Fatal(err)
	}

	cand := createCandidate(t, client, "deposed", "source-uid-deposed")
	reserved := cand.waitFor(t, "Reserved by the leader", func(st protocol.State) bool { return st.Phase == protocol.PhaseReserved })
	if holder() != leader {
		t.Fatalf("the Lease changed hands before the leader was frozen: %q, was %q", holder(), leader)
	}

	// Frozen in Permit; the source allows its reservation meanwhile.
	if err := c.Pause(sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = c.Resume(sandbox.CandidateScheduler)
		}
	}()
	cand.annotate(t, map[string]string{protocol.AllowedAnnotation: cand.allowance(reserved.Nonce)})

	waitFor(t, 60*time.Second, "the standby holding the Lease", func() (bool, string) {
		h := holder()
		return h != "" && h != leader, "held by " + h
	})
	// The new leader finds the reservation it does not hold: it reports it
	// lost, and its own Reserved may replace that report before it lands.
	cand.waitFor(t, "the old reservation reported lost or replaced", func(st protocol.State) bool {
		return st.Nonce != reserved.Nonce || st.Phase != protocol.PhaseReserved
	})

	// The old leader resumes holding an allowed reservation. It binds
	// nothing: it exits once it notices the lost Lease.
	if err := c.Resume(sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	resumed = true
	waitFor(t, 60*time.Second, "the deposed leader exiting on its lost Lease", func() (bool, string) {
		return !c.Running(sandbox.CandidateScheduler), "still running"
	})
	if p := cand.get(t); p.Spec.NodeName != "" {
		t.Fatalf("the deposed leader bound the candidate to %s (state %s)", p.Spec.NodeName, p.Annotations[protocol.StateAnnotation])
	}
	// It did try: its log says it refused (with the refusal gone, it binds).
	// Until it exited it may have scheduled the candidate again, reporting
	// the new leader's reservation lost and making one of its own; its log
	// names every reservation it made.
	logged, err := os.ReadFile(c.LogPath(sandbox.CandidateScheduler))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logged), `"Refused to bind candidate" pod="default/deposed"`) {
		t.Errorf("the deposed leader never came to bind the candidate; see %s", c.LogPath(sandbox.CandidateScheduler))
	}
	oldNonces := map[string]bool{}
	for _, m := range regexp.MustCompile(`"Reserved candidate" pod="default/deposed" node="[^"]*" nonce="([0-9a-f]+)"`).FindAllStringSubmatch(string(logged), -1) {
		oldNonces[m[1]] = true
	}
	if !oldNonces[reserved.Nonce] {
		t.Fatalf("the old leader's log names reservations %v, not %s", oldNonces, reserved.Nonce)
	}

	// The source allows the new leader's reservation: it binds, once.
	var current protocol.State
	if latest := cand.latest(); latest.Phase == protocol.PhaseReserved && !oldNonces[latest.Nonce] {
		current = latest
	} else {
		current = cand.waitFor(t, "Reserved by the new leader", func(st protocol.State) bool {
			return st.Phase == protocol.PhaseReserved && !oldNonces[st.Nonce]
		})
	}
	// The deposed leader may have made a reservation its log did not
	// keep before it exited, which the new leader then replaced: the
	// source allows the newest reservation it sees until one binds.
	var bound protocol.State
	for attempt := 1; ; attempt++ {
		cand.annotate(t, map[string]string{protocol.AllowedAnnotation: cand.allowance(current.Nonce)})
		st := cand.waitFor(t, "Bound, or a newer reservation", func(st protocol.State) bool {
			return st.Phase == protocol.PhaseBound || (st.Phase == protocol.PhaseReserved && st.Nonce != current.Nonce)
		})
		if st.Phase == protocol.PhaseBound {
			bound = st
			break
		}
		if attempt == 5 {
			t.Fatalf("never bound: the last of five reservations allowed was %s", current.Nonce)
		}
		current = st
	}
	if bound.Nonce != current.Nonce {
		t.Errorf("candidate bound by reservation %s, want the new leader's %s", bound.Nonce, current.Nonce)
	}
	if p := cand.get(t); p.Spec.NodeName != current.Node {
		t.Errorf("candidate bound to %q, the new leader reserved %q", p.Spec.NodeName, current.Node)
	}
	// Every version of the candidate the watch saw: none bound by the old
	// reservation, and the first bound one already reports the new one.
	cand.mu.Lock()
	atBinding, states := cand.atBinding, append([]protocol.State(nil), cand.states...)
	cand.mu.Unlock()
	if atBinding == nil || atBinding.Phase != protocol.PhaseBound || atBinding.Nonce != current.Nonce {
		t.Errorf("the first bound version of the candidate reports %+v, want Bound by %s", atBinding, current.Nonce)
	}
	for _, st := range states {
		if st.Phase == protocol.PhaseBound && oldNonces[st.Nonce] {
			t.Errorf("the candidate reported Bound by the deposed leader's reservation %s; states: %+v", st.Nonce, states)
		}
	}
	if !standby.Running() {
		t.Errorf("the new leader exited; see %s", standby.LogPath())
	}
}
