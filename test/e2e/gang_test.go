package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/chaos"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// gangPods are n one-CPU members of pod group name, min members each.
func gangPods(name string, n, min int, mode string) []*corev1.Pod {
	var pods []*corev1.Pod
	for i := range n {
		p := optedInPod(fmt.Sprintf("%s-%d", name, i), "1")
		p.Labels[protocol.PodGroupLabel] = name
		p.Annotations = map[string]string{protocol.GangMinMemberAnnotation: fmt.Sprint(min)}
		if mode != "" {
			p.Annotations[protocol.GangModeAnnotation] = mode
		}
		pods = append(pods, p)
	}
	return pods
}

// gangWatch is chaos.GangWatch for a test: no member may bind unless its
// whole gang stands elected, as a watch of the source pods with no code
// of the agent's sees it.
type gangWatch struct{ *chaos.GangWatch }

func watchGangs(t *testing.T, c *sandbox.Cluster, ns string, size map[string]int) *gangWatch {
	t.Helper()
	g, err := chaos.WatchGangs(t.Context(), c.Client(), ns, size)
	if err != nil {
		t.Fatal(err)
	}
	return &gangWatch{g}
}

func (g *gangWatch) check(t *testing.T) {
	t.Helper()
	if b := g.Breach(); b != "" {
		t.Fatal("partial gang: " + b)
	}
}

// TestGangAllOrNothing places gangs over two targets of four CPUs each:
// a gang of four in one target, whole; a gang of eight, which no one
// target can hold, stays Pending in oneCluster mode with every member
// saying why, and no member binds; switched to anyClusters it runs whole
// over both targets. A watch of the source pods checks throughout that no
// member binds before its whole gang stands elected.
func TestGangAllOrNothing(t *testing.T) {
	t.Parallel()
	src, c2, c3 := gangFleet(t)
	ctx := t.Context()
	plugin := buildPlugin(t)
	if _, err := sandbox.StartAgent(ctx, src, []*sandbox.Cluster{c2, c3}); err != nil {
		t.Fatal(err)
	}
	pods := src.Client().CoreV1().Pods(placementNS)
	g := watchGangs(t, src, placementNS, map[string]int{"small": 4, "big": 8})
	create := func(members []*corev1.Pod) {
		for _, p := range members {
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	nodesOf := func(members []*corev1.Pod) map[string]int {
		on, _, _ := gangState(ctx, pods, members, "")
		return on
	}

	t.Run("a gang of four runs whole in one target", func(t *testing.T) {
		small := gangPods("small", 4, 4, "")
		create(small)
		waitFor(t, 90*time.Second, "the gang of four bound", func() (bool, string) {
			on := nodesOf(small)
			return len(on) == 1 && on[onlyKey(on)] == 4, fmt.Sprintf("bound: %v", on)
		})
		g.check(t)
		for _, p := range small {
			if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 60*time.Second, "the gang of four gone from the targets", func() (bool, string) {
			n := 0
			for _, c := range []*sandbox.Cluster{c2, c3} {
				l, err := c.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err.Error()
				}
				n += len(l.Items)
			}
			return n == 0, fmt.Sprintf("%d candidates left", n)
		})
	})

	big := gangPods("big", 8, 8, "")
	t.Run("a gang of eight in one cluster: no target holds it, no member binds", func(t *testing.T) {
		create(big)
		waitFor(t, 90*time.Second, "every member waiting for its gang, with places held in both targets", func() (bool, string) {
			_, waiting, err := gangState(ctx, pods, big, "")
			if err != nil {
				return false, err.Error()
			}
			held := reservedIn(t, c2) + reservedIn(t, c3)
			return waiting == len(big) && held > 0, fmt.Sprintf("%d of %d waiting, %d reservations held", waiting, len(big), held)
		})
		// explain shows the gang: its members, and what it lacks.
		var e struct {
			Gang *struct {
				MinMember int               `json:"minMember"`
				Complete  bool              `json:"complete"`
				Missing   string            `json:"missing"`
				Members   []json.RawMessage `json:"members"`
			} `json:"gang"`
		}
		runPlugin(t, plugin, "--kubeconfig", src.Kubeconfig, "explain", big[0].Name, "-n", placementNS, "-o", "json").mustDecode(t, &e)
		if g := e.Gang; g == nil || g.MinMember != 8 || g.Complete || len(g.Members) != 8 || !strings.Contains(g.Missing, "no target holds places for 8 members") {
			t.Fatalf("explain's gang: %+v", e.Gang)
		}
		// Held places, and still nothing binds: the gate, not a lack of
		// room, holds them. Watched until every reservation held now has
		// ended (the targets' Permit timeout, 30 s, lets it go), so that
		// the gate is seen to outlast the places it held.
		heldUntilEnded(t, "the gang of eight", func() {
			if on := nodesOf(big); len(on) > 0 {
				t.Fatalf("members bound: %v", on)
			}
		}, c2, c3)
		g.check(t)
	})

	t.Run("the same gang over any clusters runs whole over both", func(t *testing.T) {
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, protocol.GangModeAnnotation, protocol.GangAnyClusters))
		for _, m := range big {
			if _, err := pods.Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// The gang may be backing off when it is switched (its turn of
		// 60 s ended while it waited in oneCluster mode): a backoff of
		// 30 s, or 60 s after a second yield, each up to a fifth more.
		// Once its turn comes, each member keeps one reservation and its
		// others are denied at once, which leaves room for the rest.
		waitFor(t, 3*time.Minute, "the gang of eight bound over both targets", func() (bool, string) {
			on := nodesOf(big)
			return podsOn(on) == len(big), fmt.Sprintf("bound: %v", on)
		})
		g.check(t)
	})
}

// gangFleet starts the gang tests' fleet: a source with no nodes and no
// scheduler, and two targets of four CPUs, c2 and c3, each with the test
// namespace. apiServerArgs go to the API servers of the source and of c2
// (c3 stays as it is).
func gangFleet(t *testing.T, apiServerArgs ...string) (src, c2, c3 *sandbox.Cluster) {
	t.Helper()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true, APIServerArgs: apiServerArgs},
		{Name: "c2", Nodes: []sandbox.NodeSpec{{CPU: "4"}}, APIServerArgs: apiServerArgs},
		{Name: "c3", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
	}})
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	return s.Cluster("src"), s.Cluster("c2"), s.Cluster("c3")
}

// gangState reads a gang's members: how many are bound to each node, and
// how many say in their PodScheduled condition that they wait for their
// gang (with a message holding msg). On a failed read it returns what it
// read so far and the error.
func gangState(ctx context.Context, pods corev1client.PodInterface, members []*corev1.Pod, msg string) (on map[string]int, waiting int, err error) {
	on = map[string]int{}
	for _, m := range members {
		p, err := pods.Get(ctx, m.Name, metav1.GetOptions{})
		if err != nil {
			return on, waiting, err
		}
		if p.Spec.NodeName != "" {
			on[p.Spec.NodeName]++
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Reason == "WaitingForGang" && strings.Contains(cond.Message, msg) {
				waiting++
			}
		}
	}
	return on, waiting, nil
}

// podsOn is how many pods on counts over all nodes.
func podsOn(on map[string]int) int {
	n := 0
	for _, k := range on {
		n += k
	}
	return n
}

// reservedIn counts the candidates of namespace placementNS in c that
// report a reservation.
func reservedIn(t *testing.T, c *sandbox.Cluster) int {
	l, err := c.Client().CoreV1().Pods(placementNS).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range l.Items {
		var s protocol.State
		if json.Unmarshal([]byte(p.Annotations[protocol.StateAnnotation]), &s) == nil && s.Phase == protocol.PhaseReserved {
			n++
		}
	}
	return n
}

// heldUntilEnded watches, until every reservation held now in the
// clusters' placement namespace has ended (a target's Permit timeout lets
// it go, at the latest), with check called at every look: what of gang
// must not happen while its places come and go.
func heldUntilEnded(t *testing.T, gang string, check func(), clusters ...*sandbox.Cluster) {
	t.Helper()
	held := map[string]bool{}
	for _, c := range clusters {
		maps.Copy(held, reservationsIn(t, c))
	}
	waitFor(t, 75*time.Second, "every reservation held by "+gang+" ended", func() (bool, string) {
		check()
		var left []string
		for _, c := range clusters {
			for k := range reservationsIn(t, c) {
				if held[k] {
					left = append(left, c.Name+":"+k)
				}
			}
		}
		return len(left) == 0, fmt.Sprintf("%d of %d reservations still held (candidate UID/nonce): %v", len(left), len(held), left)
	})
}

// reservationsIn are the reservations held in c's placement namespace, as
// candidate UID and nonce.
func reservationsIn(t *testing.T, c *sandbox.Cluster) map[string]bool {
	l, err := c.Client().CoreV1().Pods(placementNS).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range l.Items {
		var s protocol.State
		if json.Unmarshal([]byte(p.Annotations[protocol.StateAnnotation]), &s) == nil && s.Phase == protocol.PhaseReserved {
			out[string(p.UID)+"/"+s.Nonce] = true
		}
	}
	return out
}

func onlyKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}

// TestADeletedGangGivesUpItsTurn: a gang whose pods are deleted while it
// stands first does not keep the next one waiting. "first" (three pods of
// a gang of four, in a target of four CPUs) stands first holding three
// places, its turn a minute from its last progress; "second", made after,
// waits, its candidates denied. Once first's pods are deleted, second goes first at its next look
// and runs whole within 35 s. Before, the deleted gang stood first until
// its turn ran out or the queue forgot it (a minute unseen): second waited
// about a minute, and so did every gang of the source after a deleted one.
func TestADeletedGangGivesUpItsTurn(t *testing.T) {
	t.Parallel()
	src, c2 := twoClusters(t, "4")
	ctx := t.Context()
	if _, err := sandbox.StartAgent(ctx, src, []*sandbox.Cluster{c2}); err != nil {
		t.Fatal(err)
	}
	pods := src.Client().CoreV1().Pods(placementNS)
	g := watchGangs(t, src, placementNS, map[string]int{"first": 4, "second": 2})
	// Made first, and first by name where creation times tie.
	first, second := gangPods("first", 3, 4, ""), gangPods("second", 2, 2, "")
	create := func(ps []*corev1.Pod) {
		for _, p := range ps {
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	create(first)
	waitFor(t, time.Minute, "three places held by the first gang", func() (bool, string) {
		n := reservedIn(t, c2)
		return n == 3, fmt.Sprintf("%d candidates reserved in c2", n)
	})
	create(second)
	waitFor(t, time.Minute, "the second gang waiting for the first", func() (bool, string) {
		_, waiting, err := gangState(ctx, pods, second, "pod group first goes first")
		if err != nil {
			return false, err.Error()
		}
		return waiting == len(second), fmt.Sprintf("%d of %d waiting for first", waiting, len(second))
	})
	// Its candidates denied (placement.denyAfter): it holds no node, and
	// only its turn lets it reserve again, not room alone.
	waitFor(t, time.Minute, "the second gang's candidates denied", func() (bool, string) {
		l, err := c2.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		denied := 0
		for _, p := range l.Items {
			if strings.HasPrefix(p.Labels[protocol.SourceNameLabel], "second-") {
				if p.Annotations[protocol.DeniedAnnotation] != "" {
					denied++
				}
			}
		}
		return denied == len(second), fmt.Sprintf("%d of %d denied", denied, len(second))
	})
	for _, p := range first {
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	deleted := time.Now()
	waitFor(t, 35*time.Second, "the second gang bound whole once the first was deleted", func() (bool, string) {
		on, _, err := gangState(ctx, pods, second, "")
		if err != nil {
			return false, err.Error()
		}
		n := podsOn(on)
		return n == len(second), fmt.Sprintf("second %d bound", n)
	})
	t.Logf("the second gang bound whole %.1f s after the first was deleted", time.Since(deleted).Seconds())
	g.check(t)
}

// TestGangsTakeTurns: two gangs of four one-CPU pods, one target of four
// CPUs, the members created alternately, so that each gang could hold
// half of the target's room and wait for ever for the other half. The
// older gang goes first and runs whole; the younger holds no node while it
// waits (its candidates are denied), and runs whole once the older ends.
// The watch checks throughout that no member binds before its whole gang
// stood elected.
func TestGangsTakeTurns(t *testing.T) {
	t.Parallel()
	src, c2 := twoClusters(t, "4")
	ctx := t.Context()
	agent, err := sandbox.StartAgent(ctx, src, []*sandbox.Cluster{c2})
	if err != nil {
		t.Fatal(err)
	}
	pods := src.Client().CoreV1().Pods(placementNS)
	g := watchGangs(t, src, placementNS, map[string]int{"first": 4, "second": 4})
	first, second := gangPods("first", 4, 4, ""), gangPods("second", 4, 4, "")
	for i := range first {
		for _, p := range []*corev1.Pod{first[i], second[i]} {
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	boundOf := func(members []*corev1.Pod) int {
		on, _, _ := gangState(ctx, pods, members, "")
		return podsOn(on)
	}
	waitFor(t, 3*time.Minute, "the older gang bound whole", func() (bool, string) {
		a, b := boundOf(first), boundOf(second)
		return a == 4, fmt.Sprintf("first %d bound, second %d bound", a, b)
	})
	g.check(t)
	if n := boundOf(second); n != 0 {
		t.Fatalf("%d members of the younger gang bound beside the older one in a target with room for one gang", n)
	}
	waitFor(t, time.Minute, "every member of the younger gang waiting for its gang", func() (bool, string) {
		_, waiting, err := gangState(ctx, pods, second, "")
		if err != nil {
			return false, err.Error()
		}
		return waiting == len(second), fmt.Sprintf("%d of %d waiting", waiting, len(second))
	})
	for _, p := range first {
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 3*time.Minute, "the younger gang bound whole once the older ended", func() (bool, string) {
		n := boundOf(second)
		return n == 4, fmt.Sprintf("second %d bound", n)
	})
	g.check(t)
	// Both gangs placed, none waiting, the younger's candidates released
	// while it waited, as the agent's metrics say.
	waitFor(t, 30*time.Second, "the gang metrics", func() (bool, string) {
		body, err := get(http.DefaultClient, "http://"+agent.MetricsAddr+"/metrics", "")
		if err != nil {
			return false, err.Error()
		}
		m := parseMetrics(body)
		placed, _ := m.value("flotilla_gang_placed_seconds_count")
		waiting, _ := m.value("flotilla_gangs_waiting")
		// The younger gang's members were denied in the target while the
		// older went first: each once it had waited placement.denyAfter
		// (10 s), so how many depends on when the older completed (once
		// the older runs, no member of it waits, and the younger goes
		// first with no denial to write; a CI run counted 3 of 4).
		released, _ := m.value("flotilla_gang_reservations_released_total")
		return placed == 2 && waiting == 0 && released >= 1, fmt.Sprintf("%v gangs placed, %v waiting, %v reservations released", placed, waiting, released)
	})
}
