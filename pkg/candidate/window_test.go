package candidate

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

func targets(t *testing.T, n int) []*target.Target {
	t.Helper()
	var out []*target.Target
	for i := range n {
		// Never started: their caches are empty, which is all Eligible reads.
		tg, err := target.New(target.Config{Name: fmt.Sprintf("t%d", i+1), REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src"})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tg)
	}
	return out
}

func TestEligibleSpreadsAndIsStable(t *testing.T) {
	ts := targets(t, 3)
	if got := Eligible(sourcePod(t), "src", ts, 0); len(got) != 3 {
		t.Fatalf("max 0 must mean every target, got %d", len(got))
	}
	first := map[string]int{}
	for i := range 3000 {
		src := sourcePod(t)
		src.UID = types.UID(fmt.Sprintf("uid-%d", i))
		got := Eligible(src, "src", ts, 1)
		if len(got) != 1 {
			t.Fatalf("max 1 gave %d targets", len(got))
		}
		again := Eligible(src, "src", ts, 1)
		if again[0] != got[0] {
			t.Fatal("a pod's first target changed between calls")
		}
		first[got[0].Name]++
	}
	// Names that differ only in their last character, as is common, must
	// still share the pods evenly (within a few percent of a third).
	for name, n := range first {
		if n < 900 || n > 1100 {
			t.Errorf("target %s is first for %d of 3000 pods: %v", name, n, first)
		}
	}
}

func TestEligibleAndInvited(t *testing.T) {
	newTarget := func(c target.Config) *target.Target {
		c.REST, c.SourceCluster = &rest.Config{Host: "https://127.0.0.1:1"}, "src"
		tg, err := target.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	open := newTarget(target.Config{Name: "open"})
	// A namespaced Target takes the pods of its namespace only.
	other := newTarget(target.Config{Name: "elsewhere/t", Namespace: "elsewhere"})
	mine := newTarget(target.Config{Name: "default/t", Namespace: "default"})
	// An invited target covers the namespaces its invitation names.
	invited := newTarget(target.Config{Name: "invited", SummaryName: "flotilla-clustersource.src"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	invited.Start(ctx)
	invited.SetNamespaces([]string{"shop"})
	defer invited.Shutdown()
	// A mapped target covers the namespace the pod goes to there.
	mapped := newTarget(target.Config{Name: "mapped", SummaryName: "s", NamespaceMapping: map[string]string{"default": "shop"}})
	mapped.Start(ctx)
	mapped.SetNamespaces([]string{"shop"})
	defer mapped.Shutdown()

	pod := sourcePod(t)
	pod.Namespace = "default"
	got := Eligible(pod, "src", []*target.Target{open, other, mine}, 0)
	if names(got) != "open,default/t" {
		t.Errorf("eligible: %s", names(got))
	}
	yes, no := Invited(pod, []*target.Target{open, invited, mapped})
	if names(yes) != "open,mapped" || names(no) != "invited" {
		t.Errorf("invited %s, not invited %s", names(yes), names(no))
	}
}

func names(ts []*target.Target) string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return strings.Join(out, ",")
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
