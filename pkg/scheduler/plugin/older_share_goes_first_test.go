package plugin

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/flotilla-dev/flotilla/pkg/scheduler/plugin/core"
)

// preFilter runs the profile's PreFilter on a new cycle of pod.
func (s *targetScheduler) preFilter(pod *v1.Pod) (fwk.CycleState, *fwk.Status) {
	state := framework.NewCycleState()
	_, status, _ := s.framework.RunPreFilterPlugins(s.t.Context(), state, pod)
	return state, status
}

// admitAndWait runs pod's PreFilter, which must let it through, then its
// Reserve and Permit, which must wait.
func (s *targetScheduler) admitAndWait(pod *v1.Pod) *candidateCycle {
	s.t.Helper()
	if _, status := s.preFilter(pod); !status.IsSuccess() {
		s.t.Fatalf("PreFilter of %s: %s, want success", pod.Name, describe(status))
	}
	return s.reserveAndWait(pod)
}

// Two gangs of two sources, four one-CPU members each, meet on one node of
// six CPUs and reserve three places each, interleaved: neither can
// complete. When the older share's fourth member finds no node (Filter's
// verdict, as NodeResourcesFit gives it, handed to PostFilter as the
// scheduling cycle does), the younger share's three reservations are let
// go as one and its members are refused at PreFilter; the older share's
// fourth then reserves, and the younger's members are activated.
func TestOlderShareOfAnotherSourceGoesFirst(t *testing.T) {
	s := newTargetSchedulerOf(t, 30, "6")
	s.waitFor("the quotas to be known", func() (bool, error) {
		debug, ok := State.Snapshot(profileName)[profileName].(profileState)
		return ok && debug.QuotasKnown, nil
	})
	// The older share's source sorts after the younger's, so that the
	// order by name alone would be the wrong one.
	var older, younger []*v1.Pod
	for _, name := range []string{"old-0", "old-1", "old-2", "old-3"} {
		older = append(older, s.createMember(name, "source-2", "train"))
	}
	for _, name := range []string{"young-0", "young-1", "young-2", "young-3"} {
		younger = append(younger, s.createMember(name, "source-1", "train"))
	}
	var youngerCycles []*candidateCycle
	for i := range 3 {
		s.admitAndWait(older[i])
		youngerCycles = append(youngerCycles, s.admitAndWait(younger[i]))
	}

	state, status := s.preFilter(older[3])
	if !status.IsSuccess() {
		t.Fatalf("PreFilter of the older share's fourth member: %s", describe(status))
	}
	statuses := framework.NewDefaultNodeToStatus()
	statuses.Set(nodeName, fwk.NewStatus(fwk.Unschedulable, "Insufficient cpu"))
	result, status := s.framework.RunPostFilterPlugins(t.Context(), state, older[3], statuses)
	if status.IsSuccess() || status.Code() != fwk.Unschedulable || result != nil && result.NominatedNodeName != "" {
		t.Fatalf("PostFilter: %s, result %+v; want Unschedulable and no node nominated", describe(status), result)
	}

	for _, c := range youngerCycles {
		status := s.waitEnded(c)
		if !rejectedByPlugin(status) || !strings.Contains(status.Message(), "yielded to an older gang's share") {
			t.Fatalf("the younger share's %s: wait in Permit ended with %s, want rejected for the older share", c.pod.Name, describe(status))
		}
		if unreserved := s.unreserve(c); unreserved.Reason != status.Message() {
			t.Errorf("%s reported Unreserved for %q, want %q", c.pod.Name, unreserved.Reason, status.Message())
		}
	}
	for _, pod := range []*v1.Pod{younger[0], younger[3]} {
		state, status := s.preFilter(pod)
		if status.Code() != fwk.UnschedulableAndUnresolvable || status.Message() != core.ReasonOlderShareWaits {
			t.Errorf("PreFilter of the younger share's %s while the older waits for room: %s, want refused: %s", pod.Name, describe(status), core.ReasonOlderShareWaits)
		}
		// The scheduling cycle runs PostFilter after a refusal at
		// PreFilter too: a member held back does not wait for room.
		s.framework.RunPostFilterPlugins(t.Context(), state, pod, statuses)
	}
	held, _ := State.Snapshot(profileName)[profileName].(profileState)
	for _, share := range held.Shares.Items {
		if share.Share == "source-1/ns/train" && share.WaitingForRoom != nil {
			t.Errorf("the younger share, held back at PreFilter, waits for room: %+v", share)
		}
	}
	if got := s.activatedPods(); len(got) != 0 {
		t.Errorf("activated %v while the older share waits for room", got)
	}

	s.admitAndWait(older[3])
	got := s.activatedPods()
	slices.Sort(got)
	if !slices.Equal(got, []string{"young-0", "young-3"}) {
		t.Errorf("activated %v once the older share's fourth member reserved, want the members held back: young-0 and young-3", got)
	}
	if _, status := s.preFilter(younger[0]); !status.IsSuccess() {
		t.Errorf("PreFilter of the younger share's member once the older reserved: %s, want success", describe(status))
	}

	debug, ok := State.Snapshot(profileName)[profileName].(profileState)
	if !ok {
		t.Fatalf("/debug/state of the profile: %+v", State.Snapshot(profileName))
	}
	shares := debug.Shares.Items
	// The younger share holds nothing now and holds nobody back: only the
	// older one is listed.
	if len(shares) != 1 || shares[0].Share != "source-2/ns/train" || shares[0].Members != 4 || shares[0].WaitingForRoom != nil {
		t.Errorf("/debug/state shares %+v, want the older share alone, holding 4, no longer waiting", shares)
	}
}
