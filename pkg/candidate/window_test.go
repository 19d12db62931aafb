package candidate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// open is a view of a target that serves the pod's namespace and whose
// namespaces are open: holds nothing, failed nothing, weighs as the others.
func open(name string) View { return View{Name: name, Serves: true, Covers: true} }

// openViews are open views t1..tn.
func openViews(n int) []View {
	var out []View
	for i := range n {
		out = append(out, open(fmt.Sprintf("t%d", i+1)))
	}
	return out
}

func names(vs []View) string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return strings.Join(out, ",")
}

func TestEligibleSpreadsAndIsStable(t *testing.T) {
	vs := openViews(3)
	if got := Eligible(vs, "uid-1", 0); len(got) != 3 {
		t.Fatalf("max 0 must mean every target, got %d", len(got))
	}
	first := map[string]int{}
	for i := range 3000 {
		uid := fmt.Sprintf("uid-%d", i)
		got := Eligible(vs, uid, 1)
		if len(got) != 1 {
			t.Fatalf("max 1 gave %d targets", len(got))
		}
		again := Eligible(vs, uid, 1)
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

// TestEligibleAndInvited: for a pod of namespace default, a namespaced
// Target of another namespace is never eligible; a target whose
// invitation does not cover the namespace its candidate would go to is
// not invited. (ViewsOf is checked to read these from targets in
// views_of_targets_test.go.)
func TestEligibleAndInvited(t *testing.T) {
	elsewhere := View{Name: "elsewhere/t", Serves: false, Covers: true}
	mine := open("default/t")
	// Invited into shop only; the pod's candidate would go to default.
	invited := View{Name: "invited", Serves: true, Covers: false}
	// Mapped default to shop, invited into shop.
	mapped := open("mapped")

	got := Eligible([]View{open("open"), elsewhere, mine}, "uid-1", 0)
	if names(got) != "open,default/t" {
		t.Errorf("eligible: %s", names(got))
	}
	yes, no := Invited([]View{open("open"), invited, mapped})
	if names(yes) != "open,mapped" || names(no) != "invited" {
		t.Errorf("invited %s, not invited %s", names(yes), names(no))
	}
}

// TestEligibleKeepsAndWidens checks that a pod keeps the targets that hold
// its candidates whatever the weights say now, tops them up to max, and
// widens by max while all of them refused it.
func TestEligibleKeepsAndWidens(t *testing.T) {
	const uid = "uid-1"
	// Weights that would never choose t4 first.
	weighed := func(vs []View) []View {
		for i := range vs {
			p := Prospect{Room: 1000}
			if vs[i].Name == "t4" {
				p = Prospect{Room: 0.1, Misses: 1}
			}
			vs[i].Weight = p.Weight()
		}
		return vs
	}
	// with are n weighed open views, changed by set.
	with := func(n int, set map[string]func(*View)) []View {
		vs := weighed(openViews(n))
		for i := range vs {
			if f := set[vs[i].Name]; f != nil {
				f(&vs[i])
			}
		}
		return vs
	}
	held := func(v *View) { v.Holds = true }
	refused := func(v *View) { v.Holds, v.Failed = true, true }

	t.Run("kept", func(t *testing.T) {
		vs := with(4, map[string]func(*View){"t4": held})
		if got := names(Eligible(vs, uid, 1)); got != "t4" {
			t.Errorf("a pod whose candidate is in t4 got %s", got)
		}
		if got := Eligible(vs, uid, 2); len(got) != 2 || got[0].Name != "t4" {
			t.Errorf("max 2 with one held: %s", names(got))
		}
	})
	t.Run("no target joins while elected", func(t *testing.T) {
		// The pod's other candidate is gone (deleted after the election);
		// Eligible would top the set up to two, ToFanOut under an
		// election does not, even once the candidate is overdue.
		overdue := func(v *View) { v.Holds, v.Overdue = true, true }
		vs := with(4, map[string]func(*View){"t4": overdue})
		if got := ToFanOut(vs, uid, 2, false); len(got) != 2 {
			t.Fatalf("not elected, max 2, one held and overdue: %s, want two", names(got))
		}
		if got := names(ToFanOut(vs, uid, 2, true)); got != "t4" {
			t.Errorf("elected, max 2, one held in t4: %s, want t4 alone", got)
		}
	})
	t.Run("one candidate where a miss is unlikely", func(t *testing.T) {
		// A pod whose first target is sure gets it alone; one whose first
		// is not gets two.
		first := names(Eligible(with(4, nil), uid, 1))
		sure := func(v *View) { v.Sure = true }
		if got := names(ToFanOut(with(4, map[string]func(*View){first: sure}), uid, 2, false)); got != first {
			t.Errorf("first target %s sure: %s, want it alone", first, got)
		}
		// Sure by a summary that is old now: unreachable, it is no place
		// for a lone candidate (none could be created there).
		gone := func(v *View) { v.Sure, v.Failed = true, true }
		if got := ToFanOut(with(4, map[string]func(*View){first: gone}), uid, 2, false); len(got) < 2 {
			t.Errorf("first target %s sure but unreachable: %s, want more than it", first, names(got))
		}
		others := map[string]func(*View){}
		for _, v := range openViews(4) {
			if v.Name != first {
				others[v.Name] = sure
			}
		}
		if got := ToFanOut(with(4, others), uid, 2, false); len(got) != 2 {
			t.Errorf("first target %s not sure, the others sure: %s, want two", first, names(got))
		}
		// Held, it is kept alone while it waits on time; a miss or a
		// wait past its deadline brings a second.
		if got := names(ToFanOut(with(4, map[string]func(*View){first: held}), uid, 2, false)); got != first {
			t.Errorf("its lone candidate waiting on time: %s, want %s alone", got, first)
		}
		for name, f := range map[string]func(*View){"missed": refused, "overdue": func(v *View) { v.Holds, v.Overdue = true, true }} {
			if got := ToFanOut(with(4, map[string]func(*View){first: f}), uid, 2, false); len(got) != 2 || got[0].Name != first {
				t.Errorf("its lone candidate %s: %s, want %s and one more", name, names(got), first)
			}
		}
	})
	t.Run("a deleting candidate is not held", func(t *testing.T) {
		// ViewsOf reads a candidate that is going away as not held; the
		// pod is then drawn again, and the weights never put t4 first.
		vs := with(4, nil)
		if got := names(Eligible(vs, uid, 1)); got == "t4" {
			t.Errorf("a pod whose candidate in t4 is going away stays there")
		}
	})
	t.Run("widens", func(t *testing.T) {
		vs := with(5, map[string]func(*View){"t4": refused, "t2": refused})
		got := Eligible(vs, uid, 2)
		if len(got) != 4 || got[0].Name != "t2" || got[1].Name != "t4" || slices.ContainsFunc(got[2:], func(v View) bool { return v.Name == "t4" || v.Name == "t2" }) {
			t.Errorf("both held refused, max 2: %s, want t2,t4 and two others", names(got))
		}
		// Created in the two new ones: they are held now, and the
		// weights changed.
		again := openViews(5)
		for i := range again {
			for _, g := range got {
				if g.Name == again[i].Name {
					again[i].Holds, again[i].Failed = true, g.Failed
				}
			}
			again[i].Weight = Prospect{}.Weight()
		}
		sorted := func(vs []View) string {
			return names(slices.SortedFunc(slices.Values(vs), func(a, b View) int { return strings.Compare(a.Name, b.Name) }))
		}
		if now := Eligible(again, uid, 2); sorted(now) != sorted(got) {
			t.Errorf("after creating, the set moved: %s, was %s", names(now), names(got))
		}
	})
	t.Run("a silent target widens it beside a miss", func(t *testing.T) {
		// t2's scheduler is down: its API server takes the candidate and
		// nothing ever answers it. The pod's other candidate missed.
		waiting := func(v *View) { v.Holds = true }
		silent := func(v *View) { v.Holds, v.Overdue = true, true }
		if got := Eligible(with(5, map[string]func(*View){"t4": refused, "t2": waiting}), uid, 2); len(got) != 2 {
			t.Errorf("one refused, one waiting on time, max 2: %s, want the two held alone", names(got))
		}
		if got := Eligible(with(5, map[string]func(*View){"t4": waiting, "t2": silent}), uid, 2); len(got) != 2 {
			t.Errorf("one waiting on time, one overdue, max 2: %s, want the two held alone", names(got))
		}
		for name, set := range map[string]map[string]func(*View){
			"one refused, one overdue": {"t4": refused, "t2": silent},
			"both overdue":             {"t4": silent, "t2": silent},
		} {
			got := Eligible(with(5, set), uid, 2)
			if len(got) != 4 || got[0].Name != "t2" || got[1].Name != "t4" {
				t.Errorf("%s, max 2: %s, want t2,t4 and two others", name, names(got))
			}
		}
	})
}

// TestEligibleFollowsWeights checks that first candidates go to targets in
// proportion to their weights, and still to every one now and then.
func TestEligibleFollowsWeights(t *testing.T) {
	prospects := map[string]Prospect{
		"t1": {Room: 600},
		"t2": {Room: 300},
		// As much room, but it answers in 2 s and refused half: a sixth.
		"t3": {Room: 600, Answer: 2 * time.Second, Misses: 0.5},
	}
	vs := openViews(3)
	for i := range vs {
		vs[i].Weight = prospects[vs[i].Name].Weight()
	}
	first := map[string]int{}
	const pods = 6000
	for i := range pods {
		got := Eligible(vs, fmt.Sprintf("uid-%d", i), 1)
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
	// The same five targets as a pod of namespace shop and one of
	// namespace tenant see them: remote is a ClusterTarget invited into
	// shop; shop/home a namespaced Target of shop; tenant/self a self
	// Target of tenant (no invitation: every namespace open); tenant/away
	// one whose invitation covers tenant and shop; tenant/far one whose
	// invitation covers tenant only.
	shop := []View{
		{Name: "remote", Serves: true, Covers: true},
		{Name: "shop/home", Serves: true, Covers: true},
		{Name: "tenant/self", Serves: false, Covers: true},
		{Name: "tenant/away", Serves: false, Covers: true},
		{Name: "tenant/far", Serves: false, Covers: false},
	}
	invited, not := Invited(shop)
	if got := names(invited); got != "remote,shop/home" {
		t.Errorf("invited %s, want remote,shop/home", got)
	}
	if got := names(not); got != "" {
		t.Errorf("not invited %s: a Target of namespace tenant spoke of a pod of shop", got)
	}
	tenant := []View{
		{Name: "remote", Serves: true, Covers: false},
		{Name: "shop/home", Serves: false, Covers: true},
		{Name: "tenant/self", Serves: true, Covers: true},
		{Name: "tenant/away", Serves: true, Covers: true},
		{Name: "tenant/far", Serves: true, Covers: true},
	}
	invited, not = Invited(tenant)
	if got := names(invited); got != "tenant/self,tenant/away,tenant/far" {
		t.Errorf("invited %s for a pod of tenant", got)
	}
	if got := names(not); got != "remote" {
		t.Errorf("not invited %s for a pod of tenant, want remote", got)
	}
}

// TestHoldingAndAllFailed: the targets that hold the pod's candidates, in
// their order, and whether all of a set failed it (all of none did, so an
// empty set always widens).
func TestHoldingAndAllFailed(t *testing.T) {
	ok, held, failed, down := open("ok"), open("held"), open("failed"), open("down")
	held.Holds = true
	failed.Holds, failed.Failed = true, true
	down.Failed = true // unreachable: it holds nothing this agent knows of
	for _, tt := range []struct {
		name      string
		views     []View
		holding   string
		allFailed bool
	}{
		{"none", nil, "", true},
		{"one fine", []View{ok}, "", false},
		{"held and fine", []View{held, ok}, "held", false},
		{"refused and down", []View{failed, down}, "failed", true},
		{"refused and held", []View{held, failed}, "held,failed", false},
	} {
		if got := names(Holding(tt.views)); got != tt.holding {
			t.Errorf("%s: holding %q, want %q", tt.name, got, tt.holding)
		}
		if got := AllFailed(tt.views); got != tt.allFailed {
			t.Errorf("%s: all failed %v, want %v", tt.name, got, tt.allFailed)
		}
	}
}
