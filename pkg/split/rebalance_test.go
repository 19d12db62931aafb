package split

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

type fakeEvictor struct {
	evicted []string
	err     error
}

func (e *fakeEvictor) Evict(_ context.Context, _, name string, _ types.UID) error {
	if e.err != nil {
		return e.err
	}
	e.evicted = append(e.evicted, name)
	return nil
}

func TestRebalancer(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	up := t0.Add(-time.Hour)
	od := func(name string, slot int32) Member {
		return Member{Name: name, UID: types.UID(name), Place: Place{OnDemand: true, Slot: slot}, Placed: true, Created: up, ReadySince: up}
	}
	sp := func(name string) Member {
		return Member{Name: name, UID: types.UID(name), Place: Spot, Placed: true, Created: up, ReadySince: up}
	}
	settled := func(w *Workload, replicas int32) *Workload {
		w.Status = Status{Replicas: replicas, Generation: 1, ObservedGeneration: 1, Current: replicas, Updated: replicas, Ready: replicas, Available: replicas}
		return w
	}
	req := Request{Namespace: "ns", Key: workload.Key{Kind: "Deployment", Name: "web"}}
	setup := func(w *Workload, pods ...Member) (*Rebalancer, *fakeCache, *fakeEvictor, *fakeRecorder, *time.Time) {
		c := &fakeCache{workload: w, members: pods}
		ev := &fakeEvictor{}
		rec := &fakeRecorder{}
		now := t0
		return &Rebalancer{Pods: c, Workloads: c, Evictor: ev, Recorder: rec, Now: func() time.Time { return now }}, c, ev, rec, &now
	}

	t.Run("one pod at a time, from the highest slot down, while available", func(t *testing.T) {
		r, c, ev, rec, now := setup(settled(webWorkload(maxOnDemand("1")), 5), od("a", 0), od("b", 1), od("c", 2), sp("d"), sp("e"))
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ev.evicted) != "[c]" {
			t.Fatalf("evicted %v, want [c]", ev.evicted)
		}
		if events := rec.all(); len(events) != 1 || events[0].reason != ReasonRebalancing || events[0].name != "web" {
			t.Errorf("events %+v, want one %s on web", events, ReasonRebalancing)
		}
		// The cache does not show c going yet, and the status still
		// counts every replica available: nothing more.
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if len(ev.evicted) != 1 {
			t.Fatalf("evicted %v while the cache still showed the first eviction's pod", ev.evicted)
		}
		// c terminates, its replacement is not ready: not available.
		terminating := od("c", 2)
		terminating.Terminating = true
		replacement := sp("f")
		replacement.Created, replacement.ReadySince = *now, time.Time{}
		c.set(od("a", 0), od("b", 1), terminating, sp("d"), sp("e"), replacement)
		c.workload.Status.Ready, c.workload.Status.Available = 4, 4
		*now = now.Add(time.Second)
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if len(ev.evicted) != 1 {
			t.Fatalf("evicted %v while the workload was not available", ev.evicted)
		}
		// Settled again: the next one.
		replacement.ReadySince = *now
		c.set(od("a", 0), od("b", 1), sp("d"), sp("e"), replacement)
		c.workload.Status.Ready, c.workload.Status.Available = 5, 5
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ev.evicted) != "[c b]" {
			t.Fatalf("evicted %v, want [c b]", ev.evicted)
		}
	})

	t.Run("a spot pod when on-demand places are vacant", func(t *testing.T) {
		r, _, ev, _, _ := setup(settled(webWorkload(maxOnDemand("3")), 4), od("a", 0), od("b", 2), sp("d"), sp("e"))
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if len(ev.evicted) != 1 || !strings.ContainsAny(ev.evicted[0], "de") {
			t.Fatalf("evicted %v, want a spot pod", ev.evicted)
		}
	})

	t.Run("nothing when the split matches", func(t *testing.T) {
		r, _, ev, rec, _ := setup(settled(webWorkload(maxOnDemand("2")), 4), od("a", 0), od("b", 1), sp("d"), sp("e"))
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if len(ev.evicted) != 0 || len(rec.all()) != 0 {
			t.Errorf("evicted %v, events %v", ev.evicted, rec.all())
		}
	})

	t.Run("a bad annotation: told, nothing evicted", func(t *testing.T) {
		r, _, ev, rec, _ := setup(settled(webWorkload(maxOnDemand("three")), 2), od("a", 0), od("b", 1))
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		events := rec.all()
		if len(ev.evicted) != 0 || len(events) != 1 || events[0].reason != ReasonInvalidMaxOnDemand || events[0].eventType != corev1.EventTypeWarning || !strings.Contains(events[0].note, `"three"`) {
			t.Errorf("evicted %v, events %+v", ev.evicted, events)
		}
	})

	t.Run("opted out, or not labelled for the split: nothing", func(t *testing.T) {
		for _, labels := range []map[string]string{{protocol.CapacitySplitLabel: "false", protocol.ElectLabel: "true"}, {"app": "web"}} {
			w := settled(webWorkload(maxOnDemand("0")), 2)
			w.TemplateLabels = labels
			r, _, ev, _, _ := setup(w, od("a", 0), od("b", 1))
			if _, err := r.Reconcile(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			if len(ev.evicted) != 0 {
				t.Errorf("template labels %v: evicted %v", labels, ev.evicted)
			}
		}
	})

	t.Run("a multi-cluster workload is rebalanced", func(t *testing.T) {
		w := settled(webWorkload(maxOnDemand("0")), 1)
		w.TemplateLabels = map[string]string{protocol.ElectLabel: "true"}
		r, _, ev, _, _ := setup(w, od("a", 0))
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ev.evicted) != "[a]" {
			t.Errorf("evicted %v", ev.evicted)
		}
	})

	t.Run("a PodDisruptionBudget refuses: retried later", func(t *testing.T) {
		r, _, ev, _, _ := setup(settled(webWorkload(maxOnDemand("0")), 1), od("a", 0))
		ev.err = apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		res, err := r.Reconcile(t.Context(), req)
		if err != nil || res.RequeueAfter == 0 {
			t.Errorf("result %+v, %v; want a retry later", res, err)
		}
		ev.err = apierrors.NewGenericServerResponse(http.StatusInternalServerError, "create", corev1.Resource("pods/eviction"), "a", "boom", 0, true)
		if _, err := r.Reconcile(t.Context(), req); err == nil {
			t.Error("an API error was swallowed")
		}
	})

	t.Run("pods without a place are replaced, and a replacement without one pauses", func(t *testing.T) {
		unplaced := func(name string) Member {
			return Member{Name: name, UID: types.UID(name), Created: up, ReadySince: up}
		}
		r, c, ev, rec, now := setup(settled(webWorkload(maxOnDemand("1")), 3), od("a", 0), unplaced("u"), unplaced("v"))
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if len(ev.evicted) != 1 {
			t.Fatalf("evicted %v, want one of the pods without a place", ev.evicted)
		}
		gone := ev.evicted[0]
		kept := map[string]string{"u": "v", "v": "u"}[gone]
		// Its replacement came without a place: the webhook did not see it.
		*now = now.Add(3 * time.Second)
		replacement := unplaced("w")
		replacement.Created, replacement.ReadySince = now.Add(-time.Second), now.Add(-time.Second)
		c.set(od("a", 0), unplaced(kept), replacement)
		res, err := r.Reconcile(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if len(ev.evicted) != 1 || res.RequeueAfter < time.Minute {
			t.Fatalf("evicted %v, requeue %s; want a pause", ev.evicted, res.RequeueAfter)
		}
		var warned bool
		for _, e := range rec.all() {
			warned = warned || (e.reason == ReasonSplitNotApplied && e.eventType == corev1.EventTypeWarning && strings.Contains(e.note, "w"))
		}
		if !warned {
			t.Errorf("events %+v, want a Warning %s naming pod w", rec.all(), ReasonSplitNotApplied)
		}
		// After the pause, the pods without a place are replaced again.
		*now = now.Add(unplacedPause + time.Second)
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if len(ev.evicted) != 2 {
			t.Errorf("evicted %v after the pause, want one more", ev.evicted)
		}
	})

	t.Run("a workload that is not there is forgotten", func(t *testing.T) {
		r, _, ev, _, _ := setup(nil)
		r.remember(req, eviction{uid: "x", at: t0})
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if _, ok := r.lastEviction(req); ok || len(ev.evicted) != 0 {
			t.Error("state kept for a workload that is gone")
		}
	})
}
