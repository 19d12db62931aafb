package local

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// kept makes p a pod kept here of the ReplicaSet owner (none: no
// controller).
func kept(owner string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.UID = types.UID("uid-" + p.Name)
		p.Labels = map[string]string{protocol.LocalLabel: "true"}
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: types.UID("rs-" + owner), Controller: ptr.To(true)}}
		}
	}
}

// unschedulableSince makes p a pod its scheduler found no node for at t.
func unschedulableSince(t time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(t)}}
	}
}

func TestStuckPodsKeepTheirControllersPodsOut(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	clk := clocktesting.NewFakeClock(now)
	v := viewOf(t, clk, node("n1", "4"))
	sibling := pod("ns", "web-new", "100m", "", kept("web"))
	other := pod("ns", "db-new", "100m", "", kept("db"))
	if !v.Claim(sibling, false).Fits {
		t.Fatal("before any pod is stuck: want room for web's pod")
	}

	stuck := usage(pod("ns", "web-1", "100m", "", kept("web"), unschedulableSince(now.Add(-time.Minute))))
	v.podChanged(nil, stuck)
	// A pod not kept here, or bound, is never stuck.
	v.podChanged(nil, usage(pod("ns", "plain", "100m", "", unschedulableSince(now.Add(-time.Minute)))))
	v.podChanged(nil, usage(pod("ns", "bound", "100m", "n1", kept("db"))))
	got := v.stuckBefore(now)
	if len(got) != 1 || got[0].name != "web-1" || got[0].owner.Name != "web" || got[0].uid != "uid-web-1" {
		t.Fatalf("stuckBefore = %+v, want web-1 of ReplicaSet web", got)
	}
	if got := v.stuckBefore(now.Add(-2 * time.Minute)); len(got) != 0 {
		t.Fatalf("stuckBefore, before it was = %+v, want none", got)
	}
	if verdict := v.Claim(sibling, false); verdict.Fits || !strings.Contains(verdict.Reason, "ReplicaSet web") {
		t.Fatalf("a pod of web while web-1 is stuck: %+v, want not kept, naming ReplicaSet web", verdict)
	}
	if !v.Claim(other, false).Fits {
		t.Fatal("a pod of db: want room, db has no pod stuck")
	}

	// web-1 finds a node after all: web's pods may stay again.
	boundNow := usage(pod("ns", "web-1", "100m", "n1", kept("web")))
	v.podChanged(stuck, boundNow)
	if len(v.stuckBefore(now)) != 0 || !v.Claim(sibling, false).Fits {
		t.Fatal("after web-1 was bound: want nothing stuck and web's pods kept")
	}

	// web-2 is stuck, then deleted (evicted): web's pods go through the
	// targets for DefaultUnfitMemory.
	stuck2 := usage(pod("ns", "web-2", "100m", "", kept("web"), unschedulableSince(now)))
	v.podChanged(nil, stuck2)
	v.podChanged(stuck2, nil)
	if len(v.stuckBefore(now.Add(time.Second))) != 0 {
		t.Fatal("a deleted pod is still stuck")
	}
	if verdict := v.Claim(sibling, false); verdict.Fits || !strings.Contains(verdict.Reason, "deleted lately") {
		t.Fatalf("a pod of web after web-2 was deleted stuck: %+v, want not kept", verdict)
	}
	clk.Step(DefaultUnfitMemory)
	if !v.Claim(sibling, false).Fits {
		t.Fatal("after DefaultUnfitMemory: want web's pods kept again")
	}
	if len(v.unfitUntil) != 0 {
		t.Fatalf("unfitUntil after it lapsed: %v, want none", v.unfitUntil)
	}
}

// overflowOver is an Overflow of 30 s over a synced view of one node, its
// Events recorded, each eviction answered by evict.
func overflowOver(t *testing.T, evict func(*policyv1.Eviction) error) (*Overflow, *View, *events.FakeRecorder, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	v := viewOf(t, clk, node("n1", "4"))
	v.Want()
	kube := fake.NewClientset()
	kube.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, evict(a.(clienttesting.CreateAction).GetObject().(*policyv1.Eviction))
	})
	recorder := events.NewFakeRecorder(10)
	o := &Overflow{View: v, Kube: kube, Recorder: recorder, After: 30 * time.Second, clock: clk,
		evicted: map[string]bool{}, told: map[string]bool{}}
	return o, v, recorder, clk
}

func TestOverflowEvictsStuckPodsOnce(t *testing.T) {
	var evicted []string
	o, v, recorder, clk := overflowOver(t, func(e *policyv1.Eviction) error {
		evicted = append(evicted, e.Name)
		return nil
	})
	now := clk.Now()

	old := usage(pod("ns", "web-1", "100m", "", kept("web"), unschedulableSince(now.Add(-time.Minute))))
	young := usage(pod("ns", "web-2", "100m", "", kept("web"), unschedulableSince(now.Add(-10*time.Second))))
	bare := usage(pod("ns", "bare", "100m", "", kept(""), unschedulableSince(now.Add(-time.Minute))))
	for _, p := range []any{old, young, bare} {
		v.podChanged(nil, p)
	}
	ctx := context.Background()
	o.sweep(ctx)
	o.sweep(ctx)
	if len(evicted) != 1 || evicted[0] != "web-1" {
		t.Fatalf("evicted %v after two sweeps, want web-1 once (web-2 is young, bare has no controller)", evicted)
	}
	var got []string
	for len(recorder.Events) > 0 {
		got = append(got, <-recorder.Events)
	}
	if len(got) != 2 || !strings.Contains(strings.Join(got, "\n"), "Normal Overflow") || !strings.Contains(strings.Join(got, "\n"), "Warning StaysUnplaced") {
		t.Fatalf("events %q, want one Overflow and one StaysUnplaced", got)
	}

	clk.Step(30 * time.Second)
	o.sweep(ctx)
	if len(evicted) != 2 || evicted[1] != "web-2" {
		t.Fatalf("evicted %v once web-2 waited 30 s, want web-1, web-2", evicted)
	}
	// web-1 leaves the view (evicted) and is forgotten; a pod of the same
	// name made again and stuck is another pod.
	v.podChanged(old, nil)
	o.sweep(ctx)
	if o.evicted["uid-web-1"] {
		t.Fatal("web-1 is still remembered after it left")
	}
}

// TestOverflowEvictsThePodAsTheViewHoldsIt: an eviction carries the UID and
// resourceVersion the view holds, so that a pod changed since (bound by its
// scheduler after the view's last look) is not evicted; the conflict is not
// taken for an eviction, and the next sweep tries the version the view
// holds then.
func TestOverflowEvictsThePodAsTheViewHoldsIt(t *testing.T) {
	var tried []string
	o, v, recorder, clk := overflowOver(t, func(e *policyv1.Eviction) error {
		pre := e.DeleteOptions.Preconditions
		if pre == nil || pre.UID == nil || pre.ResourceVersion == nil {
			t.Fatalf("eviction preconditions %+v, want the UID and resourceVersion", pre)
		}
		tried = append(tried, *pre.ResourceVersion)
		if *pre.ResourceVersion != "6" {
			return apierrors.NewConflict(corev1.Resource("pods"), "web-1", errors.New("the object has been modified"))
		}
		return nil
	})
	now := clk.Now()
	version := func(rv string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.ResourceVersion = rv } }
	seen := usage(pod("ns", "web-1", "100m", "", kept("web"), unschedulableSince(now.Add(-time.Minute)), version("5")))
	v.podChanged(nil, seen)
	ctx := context.Background()
	o.sweep(ctx)
	if len(tried) != 1 || tried[0] != "5" || o.evicted["uid-web-1"] || len(recorder.Events) != 0 {
		t.Fatalf("after a conflict: tried %v, remembered %t, %d events; want one try at 5, nothing remembered, no Event", tried, o.evicted["uid-web-1"], len(recorder.Events))
	}
	v.podChanged(seen, usage(pod("ns", "web-1", "100m", "", kept("web"), unschedulableSince(now.Add(-time.Minute)), version("6"))))
	o.sweep(ctx)
	o.sweep(ctx)
	if len(tried) != 2 || tried[1] != "6" || !o.evicted["uid-web-1"] || len(recorder.Events) != 1 {
		t.Fatalf("once the view holds version 6: tried %v, remembered %t, %d events; want one more try at 6, remembered, an Overflow Event", tried, o.evicted["uid-web-1"], len(recorder.Events))
	}
}
