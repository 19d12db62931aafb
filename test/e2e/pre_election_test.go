package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestPreElection places pods one after another through two invited
// targets with room for many. Once both targets have answered a pod, a
// pod whose first target is sure of it is elected there before its
// candidate exists (nonce *): its one candidate is created with the
// pre-allowance, is never reported Reserved (its binding reports Bound),
// gets no allowance written after its creation, and the source pod binds
// to that target. Without pre-elections every pod's candidate is reported
// Reserved and allowed, and no election has the nonce *.
func TestPreElection(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "t1", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
		{Name: "t2", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
	}})
	ctx := t.Context()
	src := s.Cluster("src")
	targets := []*sandbox.Cluster{s.Cluster("t1"), s.Cluster("t2")}
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	for _, c := range append(targets, src) {
		if _, err := sandbox.StartAgent(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range targets {
		invite(t, src, c)
	}
	// Every version of every candidate, as each target's API server
	// wrote it.
	seen := &candidateVersions{byUID: map[string][]*corev1.Pod{}}
	for _, c := range targets {
		seen.watch(t, c)
	}

	const pods = 8
	srcPods := src.Client().CoreV1().Pods(placementNS)
	var placed []*corev1.Pod
	for i := range pods {
		created, err := srcPods.Create(ctx, optedInPod(fmt.Sprintf("p%d", i), "100m"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitPod(t, src.Client(), placementNS, created.Name, "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
		live, err := srcPods.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		placed = append(placed, live)
	}

	preElected := 0
	for i, pod := range placed {
		e, err := protocol.ParseElection(pod.Annotations[protocol.ElectionAnnotation])
		if err != nil {
			t.Fatalf("%s: %v", pod.Name, err)
		}
		if want := protocol.VirtualNodeName("", e.Target); pod.Spec.NodeName != want {
			t.Errorf("%s: bound to %s, elected %s (%s)", pod.Name, pod.Spec.NodeName, e.Target, want)
		}
		if e.Nonce != protocol.AnyReservation {
			continue
		}
		if i == 0 {
			t.Errorf("%s, the first pod, was pre-elected to %s though no target had answered yet", pod.Name, e.Target)
		}
		preElected++
		// Its candidates: the delegate alone, its versions as written.
		versions := seen.of(t, pod)
		pre := protocol.Allowance{SourceUID: string(pod.UID), Generation: e.Generation, Nonce: protocol.AnyReservation}.Encode()
		if got := versions[0].Annotations[protocol.AllowedAnnotation]; got != pre {
			t.Errorf("%s: its candidate was created with allowance %q, want %q", pod.Name, got, pre)
		}
		for _, v := range versions {
			if a := v.Annotations[protocol.AllowedAnnotation]; a != pre {
				t.Errorf("%s: a version of its candidate carries allowance %q, want %q alone", pod.Name, a, pre)
			}
			if st, err := protocol.ParseState(v.Annotations[protocol.StateAnnotation]); err == nil && st.Phase == protocol.PhaseReserved {
				t.Errorf("%s: its pre-allowed candidate was reported Reserved: %+v", pod.Name, st)
			}
		}
	}
	// The targets are sure of a pod once they have answered fast, with
	// room for eight more: every pod but the first may be pre-elected;
	// a slow first answer can leave one or two more ordinary.
	if preElected < pods/2 {
		t.Errorf("%d of %d pods pre-elected, want at least %d", preElected, pods, pods/2)
	}
	t.Logf("%d of %d pods pre-elected", preElected, pods)

	// t1's Flotilla scheduler stops: a pod pre-elected there is never
	// bound nor told it cannot be. Its pre-election is revoked once
	// overdue (its candidate deleted before it could bind), and the pod
	// runs in t2, elected the ordinary way; no pod waits on t1.
	if err := targets[0].Stop(sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	revoked := 0
	for i := range pods {
		created, err := srcPods.Create(ctx, optedInPod(fmt.Sprintf("q%d", i), "100m"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Well within the election timeout (a minute), after which any
		// stalled election is revoked.
		waitFor(t, 30*time.Second, created.Name+" bound to t2", func() (bool, string) {
			p, err := srcPods.Get(ctx, created.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return p.Spec.NodeName == protocol.VirtualNodeName("", "t2"), fmt.Sprintf("node %q, election %s", p.Spec.NodeName, p.Annotations[protocol.ElectionAnnotation])
		})
		live, err := srcPods.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if e, _ := protocol.ParseElection(live.Annotations[protocol.ElectionAnnotation]); e.Generation > 1 {
			revoked++
			if e.Nonce == protocol.AnyReservation {
				t.Errorf("%s: pre-elected again (%s) after its pre-election was revoked", live.Name, e.Encode())
			}
		}
	}
	if revoked == 0 {
		t.Errorf("no pod was pre-elected to t1 once its scheduler stopped: the revocation went untried")
	}
	t.Logf("%d of %d pods placed after t1's scheduler stopped had a pre-election revoked", revoked, pods)
}

// candidateVersions records every version of the candidates of the
// targets it watches, by source pod UID.
type candidateVersions struct {
	mu    sync.Mutex
	byUID map[string][]*corev1.Pod
}

func (c *candidateVersions) watch(t *testing.T, cluster *sandbox.Cluster) {
	t.Helper()
	pods := cluster.Client().CoreV1().Pods(placementNS)
	list, err := pods.List(t.Context(), metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	watchPods(t, pods, list.ResourceVersion,
		func(opts *metav1.ListOptions) { opts.LabelSelector = protocol.CandidateLabel + "=true" },
		func(typ watch.EventType, pod *corev1.Pod) {
			if typ == watch.Deleted {
				return
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			uid := pod.Labels[protocol.SourceUIDLabel]
			c.byUID[uid] = append(c.byUID[uid], pod)
		})
}

// of returns the versions of the source pod's candidates, once each
// target's watch has delivered its binding, failing the test when the pod
// had candidates in more than one target or none.
func (c *candidateVersions) of(t *testing.T, pod *corev1.Pod) []*corev1.Pod {
	t.Helper()
	var versions []*corev1.Pod
	waitFor(t, 30*time.Second, "the binding of "+pod.Name+"'s candidate, watched", func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		versions = append([]*corev1.Pod(nil), c.byUID[string(pod.UID)]...)
		for _, v := range versions {
			if v.Spec.NodeName != "" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d versions seen", len(versions))
	})
	names := map[string]bool{}
	for _, v := range versions {
		names[v.Name+"@"+v.Namespace+"/"+string(v.UID)] = true
	}
	if len(names) != 1 {
		t.Errorf("%s: candidates %v, want one", pod.Name, names)
	}
	return versions
}
