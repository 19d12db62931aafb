package candidate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

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
	if got := Eligible(sourcePod(t), "src", ts, 0, nil); len(got) != 3 {
		t.Fatalf("max 0 must mean every target, got %d", len(got))
	}
	first := map[string]int{}
	for i := range 3000 {
		src := sourcePod(t)
		src.UID = types.UID(fmt.Sprintf("uid-%d", i))
		got := Eligible(src, "src", ts, 1, nil)
		if len(got) != 1 {
			t.Fatalf("max 1 gave %d targets", len(got))
		}
		again := Eligible(src, "src", ts, 1, nil)
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
	got := Eligible(pod, "src", []*target.Target{open, other, mine}, 0, nil)
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

// servedTargets starts targets whose API servers (httptest) list the given
// candidates and accept any create: Eligible reads their caches.
func servedTargets(t *testing.T, n int, candidates map[string][]*corev1.Pod) []*target.Target {
	t.Helper()
	var out []*target.Target
	for i := range n {
		name := fmt.Sprintf("t%d", i+1)
		list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: nil}
		for _, c := range candidates[name] {
			list.Items = append(list.Items, *c)
		}
		body, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch {
			case r.URL.Query().Get("sendInitialEvents") == "true":
				// No streaming list here: the reflector lists instead.
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`))
			case r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			case r.Method == http.MethodGet:
				_, _ = w.Write(body)
			default:
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"c"}}`))
			}
		}))
		t.Cleanup(server.Close)
		tg, err := target.New(target.Config{Name: name, REST: &rest.Config{Host: server.URL}, SourceCluster: "src"})
		if err != nil {
			t.Fatal(err)
		}
		tg.Start(t.Context())
		t.Cleanup(tg.Shutdown)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		synced := cache.WaitForCacheSync(ctx.Done(), tg.HasSynced)
		cancel()
		if !synced {
			t.Fatalf("target %s never synced", name)
		}
		out = append(out, tg)
	}
	return out
}

func candidateIn(t *testing.T, src *corev1.Pod, target string, refused bool) *corev1.Pod {
	t.Helper()
	c, err := Build(src, "src", target, src.Namespace, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if refused {
		c.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available"}}
	}
	return c
}

// TestEligibleKeepsAndWidens checks that a pod keeps the targets that hold
// its candidates whatever the weights say now, tops them up to max, and
// widens by max while all of them refused it.
func TestEligibleKeepsAndWidens(t *testing.T) {
	src := sourcePod(t)
	// Weights that would never choose t4 first.
	prospect := func(tg *target.Target) Prospect {
		if tg.Name == "t4" {
			return Prospect{Room: 0.1, Misses: 1}
		}
		return Prospect{Room: 1000}
	}
	t.Run("kept", func(t *testing.T) {
		ts := servedTargets(t, 4, map[string][]*corev1.Pod{"t4": {candidateIn(t, src, "t4", false)}})
		if got := names(Eligible(src, "src", ts, 1, prospect)); got != "t4" {
			t.Errorf("a pod whose candidate is in t4 got %s", got)
		}
		if got := Eligible(src, "src", ts, 2, prospect); len(got) != 2 || got[0].Name != "t4" {
			t.Errorf("max 2 with one held: %s", names(got))
		}
	})
	t.Run("no target joins while elected", func(t *testing.T) {
		// The pod's other candidate is gone (deleted after the election);
		// Eligible would top the set up to two, ToFanOut under an
		// election does not.
		ts := servedTargets(t, 4, map[string][]*corev1.Pod{"t4": {candidateIn(t, src, "t4", false)}})
		if got := ToFanOut(src, "src", ts, 2, prospect, false); len(got) != 2 {
			t.Fatalf("not elected, max 2, one held: %s, want two", names(got))
		}
		if got := names(ToFanOut(src, "src", ts, 2, prospect, true)); got != "t4" {
			t.Errorf("elected, max 2, one held in t4: %s, want t4 alone", got)
		}
	})
	t.Run("a deleting candidate is not held", func(t *testing.T) {
		c := candidateIn(t, src, "t4", false)
		c.DeletionTimestamp, c.Finalizers = &metav1.Time{Time: time.Now()}, []string{"x"}
		ts := servedTargets(t, 4, map[string][]*corev1.Pod{"t4": {c}})
		if got := names(Eligible(src, "src", ts, 1, prospect)); got == "t4" {
			t.Errorf("a pod whose candidate in t4 is going away stays there")
		}
	})
	t.Run("widens", func(t *testing.T) {
		ts := servedTargets(t, 5, map[string][]*corev1.Pod{
			"t4": {candidateIn(t, src, "t4", true)},
			"t2": {candidateIn(t, src, "t2", true)},
		})
		got := Eligible(src, "src", ts, 2, prospect)
		if len(got) != 4 || got[0].Name != "t2" || got[1].Name != "t4" || slices.ContainsFunc(got[2:], func(tg *target.Target) bool { return tg.Name == "t4" || tg.Name == "t2" }) {
			t.Errorf("both held refused, max 2: %s, want t2,t4 and two others", names(got))
		}
		// Created in the two new ones (the cache lags): they are held now.
		for _, tg := range got[2:] {
			c := candidateIn(t, src, tg.Name, false)
			if _, err := tg.Create(t.Context(), c); err != nil {
				t.Fatal(err)
			}
		}
		again := Eligible(src, "src", ts, 2, func(*target.Target) Prospect { return Prospect{} })
		sorted := func(ts []*target.Target) string {
			return names(slices.SortedFunc(slices.Values(ts), func(a, b *target.Target) int { return strings.Compare(a.Name, b.Name) }))
		}
		if sorted(again) != sorted(got) {
			t.Errorf("after creating, the set moved: %s, was %s", names(again), names(got))
		}
	})
}

// TestEligibleFollowsWeights checks that first candidates go to targets in
// proportion to their weights, and still to every one now and then.
func TestEligibleFollowsWeights(t *testing.T) {
	ts := targets(t, 3)
	weights := map[string]Prospect{
		"t1": {Room: 600},
		"t2": {Room: 300},
		// As much room, but it answers in 2 s and refused half: a sixth.
		"t3": {Room: 600, Answer: 2 * time.Second, Misses: 0.5},
	}
	first := map[string]int{}
	const pods = 6000
	for i := range pods {
		src := sourcePod(t)
		src.UID = types.UID(fmt.Sprintf("uid-%d", i))
		got := Eligible(src, "src", ts, 1, func(tg *target.Target) Prospect { return weights[tg.Name] })
		first[got[0].Name]++
	}
	want := map[string]float64{"t1": 600.0 / 1000, "t2": 300.0 / 1000, "t3": 100.0 / 1000}
	for name, share := range want {
		if got := float64(first[name]) / pods; got < share*0.85 || got > share*1.15 {
			t.Errorf("%s is first for %.3f of the pods, want about %.3f (%v)", name, got, share, first)
		}
	}
}

func TestProspectWeight(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Prospect
		want float64
	}{
		{"unknown", Prospect{Room: -1}, 1},
		{"room", Prospect{Room: 50}, 50},
		{"full still gets a chance", Prospect{Room: 0}, 0.1},
		{"answers in 1s", Prospect{Room: 10, Answer: time.Second}, 5},
		{"refused every time", Prospect{Room: 10, Misses: 1}, 0.5},
		{"preferred with weight 20", Prospect{Room: 10, Preference: 20}, 20},
		{"preferred with weight 100", Prospect{Room: 1, Preference: 100}, 32},
	} {
		if got := tt.p.Weight(); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("%s: weight %v, want %v", tt.name, got, tt.want)
		}
	}
	ps := map[string]Prospect{"a": {Room: 10}, "b": {Room: 30}, "c": {Room: -1}}
	FillRoom(ps)
	if ps["c"].Room != 20 || ps["a"].Room != 10 {
		t.Errorf("FillRoom: %+v", ps)
	}
}

// TestInvitedOnlyServingTargets: a namespaced Target of another namespace
// is neither invited for a pod nor named as not inviting it, whether its
// invitation covers the pod's namespace or not.
func TestInvitedOnlyServingTargets(t *testing.T) {
	mk := func(name, namespace string, invites ...string) *target.Target {
		cfg := target.Config{Name: name, Namespace: namespace, REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src"}
		if invites != nil {
			cfg.SummaryName = "invitation"
		}
		tg, err := target.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if invites != nil {
			// Its watches fail (nothing listens there); what it was
			// invited into is what Invited reads.
			tg.Start(t.Context())
			t.Cleanup(tg.Shutdown)
			tg.SetNamespaces(invites)
		}
		return tg
	}
	cluster := mk("remote", "", "shop")
	ownNS := mk("shop/home", "shop")
	otherOpen := mk("tenant/self", "tenant")                      // a self Target: no invitation, every namespace open
	otherInvited := mk("tenant/away", "tenant", "tenant", "shop") // its invitation covers shop too
	otherNot := mk("tenant/far", "tenant", "tenant")              // its invitation does not cover shop
	all := []*target.Target{cluster, ownNS, otherOpen, otherInvited, otherNot}

	names := func(ts []*target.Target) string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Name)
		}
		return strings.Join(out, ",")
	}
	src := sourcePod(t) // of namespace shop
	invited, not := Invited(src, all)
	if got := names(invited); got != "remote,shop/home" {
		t.Errorf("invited %s, want remote,shop/home", got)
	}
	if got := names(not); got != "" {
		t.Errorf("not invited %s: a Target of namespace tenant spoke of a pod of shop", got)
	}
	tenant := sourcePod(t)
	tenant.Namespace = "tenant"
	invited, not = Invited(tenant, all)
	if got := names(invited); got != "tenant/self,tenant/away,tenant/far" {
		t.Errorf("invited %s for a pod of tenant", got)
	}
	if got := names(not); got != "remote" {
		t.Errorf("not invited %s for a pod of tenant, want remote", got)
	}
}
