package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// pluginLogLevel makes the scheduler log every reservation, decision and
// state write of the plugin, for the logs a failed test leaves behind.
var pluginLogLevel = []string{"--v=3"}

// TestPlugin drives the candidate protocol against the FlotillaCandidate
// plugin of a real scheduler, playing the source by hand.
func TestPlugin(t *testing.T) {
	t.Parallel()
	// The plugin on its own: the cluster's scheduler serves the flotilla
	// profile, no release. The node has a region and a zone but no
	// capacity type.
	node := sandbox.NodeSpec{Labels: map[string]string{corev1.LabelTopologyRegion: "eu", corev1.LabelTopologyZone: "eu-1a"}}
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "t1", Nodes: []sandbox.NodeSpec{node}, SchedulerArgs: pluginLogLevel, WithoutRelease: true}}})
	client := s.Cluster("t1").Client()

	t.Run("an allowed reservation binds to its node", func(t *testing.T) {
		c := createCandidate(t, client, "allowed", "source-uid-a")
		reserved := c.waitFor(t, "Reserved", func(st protocol.State) bool { return st.Phase == protocol.PhaseReserved })
		if reserved.Nonce == "" || reserved.Node == "" {
			t.Fatalf("Reserved state lacks nonce or node: %+v", reserved)
		}
		c.staysUnbound(t, 2*time.Second)

		c.annotate(t, map[string]string{protocol.AllowedAnnotation: c.allowance(reserved.Nonce)})
		bound := c.waitFor(t, "Bound", func(st protocol.State) bool { return st.Phase == protocol.PhaseBound })
		if bound.Nonce != reserved.Nonce || bound.Node != reserved.Node {
			t.Errorf("Bound state %+v does not match reservation %+v", bound, reserved)
		}
		if node := c.get(t).Spec.NodeName; node != reserved.Node {
			t.Errorf("candidate bound to %q, reserved %q", node, reserved.Node)
		}
		// Both reports carry the node's values of the topology keys (the
		// default ones), as the node's labels say.
		n, err := client.CoreV1().Nodes().Get(t.Context(), bound.Node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, k := range protocol.DefaultTopologyKeys {
			if v, ok := n.Labels[k]; ok {
				want[k] = v
			}
		}
		if len(want) != 2 {
			t.Fatalf("node %s has labels %v, want a region and a zone", n.Name, n.Labels)
		}
		if !maps.Equal(bound.Topology, want) || !maps.Equal(reserved.Topology, want) {
			t.Errorf("Reserved reports topology %v and Bound %v, want node %s's %v", reserved.Topology, bound.Topology, n.Name, want)
		}
		// The plugin binds with a Binding that carries the Bound state:
		// no version of the candidate is bound and still Reserved.
		c.mu.Lock()
		atBinding := c.atBinding
		c.mu.Unlock()
		if atBinding == nil || atBinding.Phase != protocol.PhaseBound {
			t.Errorf("the binding did not carry the Bound state: state when first seen bound %+v", atBinding)
		}
	})

	t.Run("only the source's allowance of the current reservation binds", func(t *testing.T) {
		c := createCandidate(t, client, "denied", "source-uid-b")
		first := c.waitFor(t, "Reserved", func(st protocol.State) bool { return st.Phase == protocol.PhaseReserved })

		c.annotate(t, map[string]string{protocol.AllowedAnnotation: c.allowance("0123456789abcdef")})
		c.staysUnbound(t, 3*time.Second)
		c.annotate(t, map[string]string{protocol.AllowedAnnotation: protocol.Allowance{SourceUID: "someone-else", Generation: 1, Nonce: first.Nonce}.Encode()})
		c.staysUnbound(t, 3*time.Second)

		// A denial that is not of this candidate's source pod (an old,
		// nonce-only one; another pod's) changes nothing.
		c.annotate(t, map[string]string{protocol.DeniedAnnotation: first.Nonce})
		c.staysUnbound(t, 2*time.Second)
		c.annotate(t, map[string]string{protocol.DeniedAnnotation: protocol.Denial{SourceUID: "someone-else", Generation: 2}.Encode()})
		c.staysUnbound(t, 2*time.Second)
		if st := c.latest(); st.Nonce != first.Nonce || st.Phase != protocol.PhaseReserved {
			t.Fatalf("a denial of another pod ended reservation %s: state is now %+v", first.Nonce, st)
		}

		// The source denies the candidate; the allowance written with the
		// denial names its reservation and is stale from now on.
		c.annotate(t, map[string]string{
			protocol.DeniedAnnotation:  protocol.Denial{SourceUID: c.sourceUID, Generation: 2}.Encode(),
			protocol.AllowedAnnotation: c.allowance(first.Nonce),
		})
		unreserved := c.waitFor(t, "Unreserved", func(st protocol.State) bool {
			return st.Phase == protocol.PhaseUnreserved && st.Nonce == first.Nonce
		})
		if !strings.Contains(unreserved.Reason, protocol.DeniedMessage) {
			t.Errorf("Unreserved reason %q does not mention the denial", unreserved.Reason)
		}
		// While the denial stands, no new reservation is made.
		c.staysUnbound(t, 3*time.Second)
		if st := c.latest(); st.Phase != protocol.PhaseUnreserved {
			t.Fatalf("reserved again while denied: %+v", st)
		}
		c.lift(t, protocol.DeniedAnnotation)
		second := c.waitFor(t, "Reserved with a new nonce", func(st protocol.State) bool {
			return st.Phase == protocol.PhaseReserved && st.Nonce != first.Nonce
		})
		c.staysUnbound(t, 3*time.Second)
		if st := c.latest(); st.Nonce != second.Nonce || st.Phase != protocol.PhaseReserved {
			t.Fatalf("the stale allowance disturbed reservation %s: state is now %+v", second.Nonce, st)
		}

		c.annotate(t, map[string]string{protocol.AllowedAnnotation: c.allowance(second.Nonce)})
		bound := c.waitFor(t, "Bound", func(st protocol.State) bool { return st.Phase == protocol.PhaseBound })
		if bound.Nonce != second.Nonce || c.get(t).Spec.NodeName != second.Node {
			t.Errorf("bound as %+v on %q, want reservation %+v", bound, c.get(t).Spec.NodeName, second)
		}
	})

	t.Run("a pre-allowed candidate binds on its first reservation, with no Reserved report", func(t *testing.T) {
		preAllowed := func(uid string) func(*corev1.Pod) {
			return func(pod *corev1.Pod) {
				pod.Annotations = map[string]string{protocol.AllowedAnnotation: protocol.Allowance{SourceUID: uid, Generation: 1, Nonce: protocol.AnyReservation}.Encode()}
			}
		}
		c := createCandidateWith(t, client, "pre-allowed", "source-uid-p", preAllowed("source-uid-p"))
		bound := c.waitFor(t, "Bound", func(st protocol.State) bool { return st.Phase == protocol.PhaseBound })
		if !protocol.ValidNonce(bound.Nonce) || bound.Node == "" || c.get(t).Spec.NodeName != bound.Node {
			t.Errorf("bound as %+v on %q", bound, c.get(t).Spec.NodeName)
		}
		if all := c.all(); len(all) != 1 {
			t.Errorf("the candidate reported %+v, want Bound alone", all)
		}
		// A pre-allowance of another source pod is none: the candidate is
		// reserved, reported, and waits.
		other := createCandidateWith(t, client, "pre-allowed-elsewhere", "source-uid-q", preAllowed("source-uid-p"))
		other.waitFor(t, "Reserved", func(st protocol.State) bool { return st.Phase == protocol.PhaseReserved })
		other.staysUnbound(t, 3*time.Second)
	})

	t.Run("an ordinary pod of the flotilla profile binds on its own", func(t *testing.T) {
		pod := podSpec("ordinary")
		pod.Spec.SchedulerName = protocol.SchedulerName
		created, err := client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got *corev1.Pod
		err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err = client.CoreV1().Pods(created.Namespace).Get(ctx, created.Name, metav1.GetOptions{})
			return err == nil && got.Spec.NodeName != "", err
		})
		if err != nil {
			t.Fatalf("ordinary pod not bound: %v", err)
		}
		if v, ok := got.Annotations[protocol.StateAnnotation]; ok {
			t.Errorf("ordinary pod carries a candidate state %q", v)
		}
	})
}

// TestPluginPermitTimeout checks that a reservation nobody answers ends when
// Permit times out and that the candidate then reserves again.
func TestPluginPermitTimeout(t *testing.T) {
	t.Parallel()
	config := strings.Replace(sandbox.DefaultSchedulerConfig, "permitTimeoutSeconds: 30", "permitTimeoutSeconds: 3", 1)
	if config == sandbox.DefaultSchedulerConfig {
		t.Fatal("DefaultSchedulerConfig no longer sets permitTimeoutSeconds: 30")
	}
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "t1", Nodes: []sandbox.NodeSpec{{}}, SchedulerConfig: config, SchedulerArgs: pluginLogLevel, WithoutRelease: true}}})
	client := s.Cluster("t1").Client()

	t.Run("an unanswered reservation ends at the timeout", func(t *testing.T) {
		c := createCandidate(t, client, "unanswered", "source-uid-c")
		first := c.waitFor(t, "Reserved", func(st protocol.State) bool { return st.Phase == protocol.PhaseReserved })
		unreserved := c.waitFor(t, "Unreserved after the timeout", func(st protocol.State) bool {
			return st.Phase == protocol.PhaseUnreserved && st.Nonce == first.Nonce
		})
		if !strings.Contains(unreserved.Reason, "timed out") {
			t.Errorf("Unreserved reason %q does not mention the timeout", unreserved.Reason)
		}
		c.waitFor(t, "Reserved again with a new nonce", func(st protocol.State) bool {
			return st.Phase == protocol.PhaseReserved && st.Nonce != first.Nonce
		})
		if node := c.get(t).Spec.NodeName; node != "" {
			t.Errorf("unanswered candidate bound to %s", node)
		}
	})

	// A gang's share (candidates with one gang-share annotation) whose
	// members arrive one a second, over longer than the Permit timeout:
	// the first member is held past its own timeout while the others
	// join, and once none joined for a timeout, every member is let go
	// together; the members then gather again, and an allowed one binds.
	t.Run("a gang's share is held while it gathers and let go as one", func(t *testing.T) {
		const permit = 3 * time.Second
		var members []*candidate
		for i := range 6 {
			if i > 0 {
				// The members arrive slowly: that is the scenario,
				// not a synchronisation.
				time.Sleep(time.Second)
			}
			members = append(members, createCandidateWith(t, client, fmt.Sprintf("member-%d", i), fmt.Sprintf("source-uid-m%d", i), func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("100m")
				p.Annotations = map[string]string{protocol.ShareAnnotation: "g1"}
			}))
		}
		first := make([]protocol.State, len(members))
		var reservedAt, endedAt []time.Time
		for i, c := range members {
			first[i] = c.waitFor(t, "Reserved", func(st protocol.State) bool { return st.Phase == protocol.PhaseReserved })
			reservedAt = append(reservedAt, c.seenAt(first[i]))
		}
		for i, c := range members {
			ended := c.waitFor(t, "Unreserved with its share", func(st protocol.State) bool {
				return st.Phase == protocol.PhaseUnreserved && st.Nonce == first[i].Nonce
			})
			if !strings.Contains(ended.Reason, "share") {
				t.Errorf("%s's reservation ended: %q; want its share let go", c.name, ended.Reason)
			}
			endedAt = append(endedAt, c.seenAt(ended))
		}
		if held := endedAt[0].Sub(reservedAt[0]); held < reservedAt[5].Sub(reservedAt[0])+permit-time.Second {
			t.Errorf("the first member was held %s: its share gathered until %s later, and it was to be held a Permit timeout (%s) past that", held, reservedAt[5].Sub(reservedAt[0]), permit)
		}
		lo, hi := slices.MinFunc(endedAt, time.Time.Compare), slices.MaxFunc(endedAt, time.Time.Compare)
		if hi.Sub(lo) > 1500*time.Millisecond {
			t.Errorf("the share's members were let go over %s, not together: %v", hi.Sub(lo), endedAt)
		}
		again := members[5].waitFor(t, "Reserved again", func(st protocol.State) bool { return st.Phase == protocol.PhaseReserved })
		members[5].annotate(t, map[string]string{protocol.AllowedAnnotation: members[5].allowance(again.Nonce)})
		members[5].waitFor(t, "Bound", func(st protocol.State) bool { return st.Phase == protocol.PhaseBound && st.Nonce == again.Nonce })
	})
}

// candidate is a candidate pod and every state the scheduler reported on it,
// in order, as seen through a watch.
type candidate struct {
	client    kubernetes.Interface
	namespace string
	name      string
	sourceUID string

	mu     sync.Mutex
	states []protocol.State
	// at is when each state was seen.
	at []time.Time
	// next is the index of the first state no waitFor has matched yet.
	next int
	// atBinding is the state of the first version seen with a node name.
	atBinding *protocol.State
}

func createCandidate(t *testing.T, client kubernetes.Interface, name, sourceUID string) *candidate {
	t.Helper()
	return createCandidateWith(t, client, name, sourceUID, nil)
}

// createCandidateWith is createCandidate with the pod changed by shape
// before it is created.
func createCandidateWith(t *testing.T, client kubernetes.Interface, name, sourceUID string, shape func(*corev1.Pod)) *candidate {
	t.Helper()
	pod := podSpec(name)
	if shape != nil {
		shape(pod)
	}
	pod.Spec.SchedulerName = protocol.SchedulerName
	pod.Labels[protocol.CandidateLabel] = "true"
	pod.Labels[protocol.SourceUIDLabel] = sourceUID
	created, err := client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating candidate %s: %v", name, err)
	}
	c := &candidate{client: client, namespace: created.Namespace, name: created.Name, sourceUID: sourceUID}
	t.Cleanup(func() { t.Logf("states of candidate %s: %+v", name, c.all()) })
	watchPods(t, client.CoreV1().Pods(created.Namespace), created.ResourceVersion,
		func(opts *metav1.ListOptions) { opts.FieldSelector = "metadata.name=" + created.Name },
		func(_ watch.EventType, pod *corev1.Pod) { c.observe(t, pod) })
	return c
}

// watchPods hands each pod event that pods' watch, narrowed by narrow,
// delivers from resourceVersion on to each, in order, until the test ends
// (its cleanups run after the watch stopped, if registered before).
func watchPods(t *testing.T, pods typedcorev1.PodInterface, resourceVersion string, narrow func(*metav1.ListOptions), each func(watch.EventType, *corev1.Pod)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		narrow(&opts)
		return pods.Watch(ctx, opts)
	}}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, resourceVersion, lw)
	if err != nil {
		cancel()
		t.Fatalf("watching pods: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				each(ev.Type, pod)
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); cancel(); <-done })
}

func (c *candidate) observe(t *testing.T, pod *corev1.Pod) {
	raw, ok := pod.Annotations[protocol.StateAnnotation]
	if !ok {
		return
	}
	var st protocol.State
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Errorf("candidate %s carries a malformed state %q: %v", c.name, raw, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.states); n == 0 || !sameState(c.states[n-1], st) {
		c.states = append(c.states, st)
		c.at = append(c.at, time.Now())
	}
	if pod.Spec.NodeName != "" && c.atBinding == nil {
		c.atBinding = &st
	}
}

// sameState compares states field by field (a State holds a map).
func sameState(a, b protocol.State) bool {
	return a.Phase == b.Phase && a.Nonce == b.Nonce && a.Node == b.Node && a.Score == b.Score &&
		a.Reason == b.Reason && maps.Equal(a.Topology, b.Topology)
}

// seenAt is when the watch first saw st.
func (c *candidate) seenAt(st protocol.State) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.states {
		if sameState(s, st) {
			return c.at[i]
		}
	}
	return time.Time{}
}

func (c *candidate) all() []protocol.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]protocol.State(nil), c.states...)
}

func (c *candidate) latest() protocol.State {
	all := c.all()
	if len(all) == 0 {
		return protocol.State{}
	}
	return all[len(all)-1]
}

// waitFor returns the first state after the last one it returned that
// matches, so a later wait never matches an earlier transition.
func (c *candidate) waitFor(t *testing.T, what string, match func(protocol.State) bool) protocol.State {
	t.Helper()
	var found protocol.State
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := c.next; i < len(c.states); i++ {
			if match(c.states[i]) {
				found = c.states[i]
				c.next = i + 1
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("candidate %s never reported %s; states seen: %+v", c.name, what, c.all())
	}
	return found
}

// staysUnbound checks, for d, that the candidate is not bound.
func (c *candidate) staysUnbound(t *testing.T, d time.Duration) {
	t.Helper()
	errBound := errors.New("bound")
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, d, true, func(context.Context) (bool, error) {
		// The poll's own context ends with d; the read must not fail on it.
		pod, err := c.client.CoreV1().Pods(c.namespace).Get(t.Context(), c.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pod.Spec.NodeName != "" {
			return false, fmt.Errorf("%w to %s", errBound, pod.Spec.NodeName)
		}
		return false, nil
	})
	if !wait.Interrupted(err) {
		t.Fatalf("candidate %s should have stayed unbound for %s: %v; states: %+v", c.name, d, err, c.all())
	}
}

func (c *candidate) allowance(nonce string) string {
	return protocol.Allowance{SourceUID: c.sourceUID, Generation: 1, Nonce: nonce}.Encode()
}

// annotate writes annotations as the source would, with a merge patch.
func (c *candidate) annotate(t *testing.T, annotations map[string]string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.CoreV1().Pods(c.namespace).Patch(t.Context(), c.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating candidate %s: %v", c.name, err)
	}
}

// lift removes an annotation, as the source lifts a denial.
func (c *candidate) lift(t *testing.T, key string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: nil}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.CoreV1().Pods(c.namespace).Patch(t.Context(), c.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("removing %s from candidate %s: %v", key, c.name, err)
	}
}

func (c *candidate) get(t *testing.T) *corev1.Pod {
	t.Helper()
	pod, err := c.client.CoreV1().Pods(c.namespace).Get(t.Context(), c.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func podSpec(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "c",
				Image: "registry.example/app:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("1"),
					corev1.ResourceMemory: resource.MustParse("1Gi"),
				}},
			}},
		},
	}
}
