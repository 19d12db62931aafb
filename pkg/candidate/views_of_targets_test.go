package candidate

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

func candidateIn(t *testing.T, src *corev1.Pod, target, namespace string, refused bool) *corev1.Pod {
	t.Helper()
	c, err := Build(src, "src", target, namespace, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if refused {
		c.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available"}}
	}
	return c
}

// TestViewsOfReadsTargets: what each target holds of a pod and answered,
// whether it serves the pod's namespace and is invited where its
// candidate would go, read from targets over fake clientsets.
func TestViewsOfReadsTargets(t *testing.T) {
	// The fake clientset does not stream a watch's initial list.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	src := sourcePod(t) // web-1 of namespace shop
	started := func(cfg target.Config, api *fake.Clientset, invites ...string) *target.Target {
		t.Helper()
		cfg.SourceCluster = "src"
		tg, err := target.NewWithClient(cfg, api)
		if err != nil {
			t.Fatal(err)
		}
		tg.Start(t.Context())
		t.Cleanup(tg.Shutdown)
		if invites != nil {
			tg.SetNamespaces(invites)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if !cache.WaitForCacheSync(ctx.Done(), tg.HasSynced) {
			t.Fatalf("target %s never synced", cfg.Name)
		}
		return tg
	}
	with := func(objs ...runtime.Object) *fake.Clientset { return fake.NewClientset(objs...) }

	deleting := candidateIn(t, src, "deleting", "shop", false)
	deleting.DeletionTimestamp, deleting.Finalizers = &metav1.Time{Time: time.Now()}, []string{"x"}
	earlier := candidateIn(t, src, "earlier", "shop", false)
	earlier.Labels[protocol.SourceUIDLabel] = "uid-of-an-earlier-web-1"
	down := with()
	down.PrependReactor("create", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})

	held := started(target.Config{Name: "held"}, with(candidateIn(t, src, "held", "shop", false)))
	refused := started(target.Config{Name: "refused"}, with(candidateIn(t, src, "refused", "shop", true)))
	goingAway := started(target.Config{Name: "deleting"}, with(deleting))
	other := started(target.Config{Name: "earlier"}, with(earlier))
	created := started(target.Config{Name: "created"}, with())
	unreachable := started(target.Config{Name: "down"}, down)
	ownNS := started(target.Config{Name: "shop/home", Namespace: "shop"}, with())
	otherNS := started(target.Config{Name: "tenant/t", Namespace: "tenant"}, with())
	// Invited into default only: the pod's candidate would go to shop.
	uninvited := started(target.Config{Name: "uninvited", SummaryName: "s"}, with(), "default")
	// Maps shop to away, invited into away, and holds the pod's candidate
	// there.
	mapped := started(target.Config{Name: "mapped", SummaryName: "s", NamespaceMapping: map[string]string{"shop": "away"}},
		with(candidateIn(t, src, "mapped", "away", true)), "away")

	// Created through this agent: held before any cache says so.
	if _, err := created.Create(t.Context(), candidateIn(t, src, "created", "shop", false)); err != nil {
		t.Fatal(err)
	}
	if _, err := unreachable.Create(t.Context(), candidateIn(t, src, "down", "shop", false)); err == nil {
		t.Fatal("a create the target did not answer succeeded")
	}

	all := []*target.Target{held, refused, goingAway, other, created, unreachable, ownNS, otherNS, uninvited, mapped}
	prospect := func(tg *target.Target) Prospect {
		if tg == held {
			return Prospect{Room: 50}
		}
		return Prospect{Room: -1}
	}
	views := ViewsOf(src, "src", all, prospect)
	want := map[string]View{
		"held":      {Name: "held", Serves: true, Covers: true, Holds: true, Weight: 50},
		"refused":   {Name: "refused", Serves: true, Covers: true, Holds: true, Failed: true, Weight: 1},
		"deleting":  {Name: "deleting", Serves: true, Covers: true, Weight: 1},
		"earlier":   {Name: "earlier", Serves: true, Covers: true, Weight: 1},
		"created":   {Name: "created", Serves: true, Covers: true, Holds: true, Weight: 1},
		"down":      {Name: "down", Serves: true, Covers: true, Failed: true, Weight: 1},
		"shop/home": {Name: "shop/home", Serves: true, Covers: true, Weight: 1},
		"tenant/t":  {Name: "tenant/t", Serves: false, Covers: true, Weight: 1},
		"uninvited": {Name: "uninvited", Serves: true, Covers: false, Weight: 1},
		"mapped":    {Name: "mapped", Serves: true, Covers: true, Holds: true, Failed: true, Weight: 1},
	}
	if len(views) != len(all) {
		t.Fatalf("%d views of %d targets", len(views), len(all))
	}
	for i, v := range views {
		if v.Name != all[i].Name {
			t.Errorf("view %d is of %s, want %s: the targets' order", i, v.Name, all[i].Name)
		}
		w := want[v.Name]
		if v.Name == "uninvited" {
			// Its ClusterSummary watch dials a host that never resolves:
			// whether it failed yet is a matter of time.
			w.Failed = v.Failed
		}
		if v != w {
			t.Errorf("view of %s:\n got %+v\nwant %+v", v.Name, v, w)
		}
	}
	if got := ViewsOf(src, "src", all[:1], nil); got[0].Weight != 1 {
		t.Errorf("without prospects a view weighs %v, want 1", got[0].Weight)
	}

	// Pick finds the targets of the views, in the views' order.
	picked := Pick(all, []View{{Name: "mapped"}, {Name: "held"}, {Name: "gone"}})
	if len(picked) != 2 || picked[0] != mapped || picked[1] != held {
		t.Errorf("picked %v", picked)
	}
}
