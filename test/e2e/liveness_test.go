package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	flotillacandidate "github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestSameNameRecreated deletes a pod and creates it again under the same
// name while its target cannot be reached: once the target is back, the
// candidate of the earlier pod is collected, though the name lives on.
func TestSameNameRecreated(t *testing.T) {
	t.Parallel()
	src, c2 := sourceAndTarget(t, "4")
	ctx := t.Context()
	srcPods, c2Pods := src.Client().CoreV1().Pods(placementNS), c2.Client().CoreV1().Pods(placementNS)

	// A pod no node fits: its candidate waits in c2, unschedulable.
	first, err := srcPods.Create(ctx, optedInPod("stateful-0", "100"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	candidatesOf := func(uid types.UID) func() (bool, string) {
		return func() (bool, string) {
			list, err := c2Pods.List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(uid)})
			if err != nil {
				return false, err.Error()
			}
			return len(list.Items) == 1, fmt.Sprintf("%d candidates of %s", len(list.Items), uid)
		}
	}
	waitFor(t, 60*time.Second, "the first pod's candidate in c2", candidatesOf(first.UID))

	if err := c2.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := srcPods.Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the first pod gone", func() (bool, string) {
		p, err := srcPods.Get(ctx, first.Name, metav1.GetOptions{})
		return err != nil, fmt.Sprintf("still there (uid %s, err %v)", p.UID, err)
	})
	second, err := srcPods.Create(ctx, optedInPod("stateful-0", "100"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}

	waitFor(t, 60*time.Second, "the second pod's candidate in c2", candidatesOf(second.UID))
	waitFor(t, 60*time.Second, "no candidate of the first pod left in c2", func() (bool, string) {
		list, err := c2Pods.List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(first.UID)})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d candidates of the first pod left", len(list.Items))
	})
}

// TestBlackholedTarget places pods while one target accepts connections
// and never answers (packets dropped, not refused): once the source knows
// that target does not answer, placement on the others does not wait a
// call timeout for it.
func TestBlackholedTarget(t *testing.T) {
	t.Parallel()
	src, c2 := sourceAndTarget(t, "32")
	ctx := t.Context()

	// A listener that takes every connection and never says a word.
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hole.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: hole
  cluster:
    server: https://%s
    certificate-authority-data: %s
users:
- name: hole
  user:
    token: nobody-answers
contexts:
- name: hole
  context: {cluster: hole, user: hole}
current-context: hole
`, hole.Addr(), caDataOf(t, c2.Kubeconfig))
	cl := src.CRClient()
	if err := cl.Create(ctx, sandbox.KubeconfigSecret("flotilla-target-hole", []byte(kubeconfig))); err != nil {
		t.Fatal(err)
	}
	createClusterTarget(t, cl, "hole", "flotilla-target-hole")
	if err := src.WaitTarget(ctx, client.ObjectKey{Name: "hole"}, 60*time.Second, func(s *v1alpha1.TargetStatus) bool {
		c := meta.FindStatusCondition(s.Conditions, v1alpha1.TargetReachable)
		return c != nil && c.Status == metav1.ConditionFalse
	}); err != nil {
		t.Fatal(err)
	}

	const n = 20
	srcPods := src.Client().CoreV1().Pods(placementNS)
	for i := range n {
		if _, err := srcPods.Create(ctx, optedInPod(fmt.Sprintf("web-%d", i), "100m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := waitSourcePods(t, src.Client(), "app", n, func(p *corev1.Pod) bool { return p.Spec.NodeName == "flotilla-c2" })
	var waits []time.Duration
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
				waits = append(waits, c.LastTransitionTime.Sub(p.CreationTimestamp.Time))
			}
		}
	}
	if len(waits) != n {
		t.Fatalf("%d of %d pods have a PodScheduled=True condition", len(waits), n)
	}
	slices.Sort(waits)
	median := waits[n/2]
	t.Logf("creation to bound with a blackholed target: median %s, max %s", median, waits[n-1])
	// Each call to the blackholed target would cost its timeout (10s).
	if median >= 10*time.Second {
		t.Errorf("median creation to bound %s: placement waited on the target that does not answer", median)
	}
}

// sourceAndTarget starts src, whose agent targets c2 (one node of cpu
// CPUs) with c2's admin kubeconfig, with placementNS opted in in both.
func sourceAndTarget(t *testing.T, cpu string) (src, c2 *sandbox.Cluster) {
	t.Helper()
	src, c2 = twoClusters(t, cpu)
	if _, err := sandbox.StartAgent(t.Context(), src, []*sandbox.Cluster{c2}); err != nil {
		t.Fatal(err)
	}
	return src, c2
}

// TestElectionOnAStalledTarget elects a reservation that no scheduler
// holds: a candidate in c2 reports Reserved (the test writes it, as c2's
// scheduler would have before it went away for good) while c2's scheduler
// is stopped, so the allowance is never acted on. Pod a waits on it until
// the election timeout revokes it; pod b's elected candidate is deleted
// (a target's operator cleaning up), which frees its election at once.
// Both then run in c3. Last, pod c is elected in c2 the same way and c2's
// ClusterTarget is deleted: once the drain has deleted c's candidate and
// the target is gone, c runs in c3 too. Without the revocation, a waits for
// ever; without releasing an election whose candidate is gone, b does;
// without releasing one whose target is gone, c does.
func TestElectionOnAStalledTarget(t *testing.T) {
	t.Parallel()
	const timeout = 20 * time.Second
	src, c2, c3 := stalledTargets(t, "4", "agent.electionTimeout="+timeout.String())
	ctx := t.Context()
	srcPods, c2Pods := src.Client().CoreV1().Pods(placementNS), c2.Client().CoreV1().Pods(placementNS)

	// candidateIn waits for the candidate of pod in c.
	candidateIn := func(c *sandbox.Cluster, pod *corev1.Pod) *corev1.Pod {
		t.Helper()
		var cand *corev1.Pod
		waitFor(t, 60*time.Second, "the candidate of "+pod.Name+" in "+c.Name, func() (bool, string) {
			list, err := c.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(pod.UID)})
			if err != nil || len(list.Items) != 1 {
				return false, fmt.Sprintf("%d candidates (%v)", len(list.Items), err)
			}
			cand = &list.Items[0]
			return true, ""
		})
		return cand
	}
	electionOf := func(pod *corev1.Pod) protocol.Election {
		t.Helper()
		live, err := srcPods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e, err := protocol.ParseElection(live.Annotations[protocol.ElectionAnnotation])
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	pods := map[string]*corev1.Pod{}
	stale := map[string]*corev1.Pod{}
	// electInC2 creates a pod and has it elected in c2 on a reservation
	// no scheduler holds, the test writing c2's report.
	electInC2 := func(name string) {
		t.Helper()
		pod, err := srcPods.Create(ctx, optedInPod(name, "1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[name] = pod
		candidateIn(c3, pod)
		cand := candidateIn(c2, pod)
		stale[name] = cand
		reportReserved(t, c2Pods, cand.Name, "gone-"+name, 50)
		waitFor(t, 30*time.Second, name+" elected in c2 and allowed there", func() (bool, string) {
			e := electionOf(pod)
			cand, err := c2Pods.Get(ctx, stale[name].Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			want := protocol.Allowance{SourceUID: string(pod.UID), Generation: e.Generation, Nonce: "gone-" + name}.Encode()
			return e.Target == "c2" && cand.Annotations[protocol.AllowedAnnotation] == want,
				fmt.Sprintf("election %s, allowance %q", e.Encode(), cand.Annotations[protocol.AllowedAnnotation])
		})
	}
	electInC2("a")
	electedA := time.Now()
	electInC2("b")

	// b's elected candidate goes: its election is released, though no
	// other target has reserved anything yet.
	if err := c2Pods.Delete(ctx, stale["b"].Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &stale["b"].UID}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, timeout/2, "b's election released once its candidate is gone", func() (bool, string) {
		e := electionOf(pods["b"])
		return !e.Elected(), "election " + e.Encode()
	})
	if e := electionOf(pods["a"]); e.Target != "c2" || time.Since(electedA) >= timeout {
		t.Fatalf("a's election moved before its timeout, or b's release took the whole timeout: %s after %s", e.Encode(), time.Since(electedA))
	}

	// c3 reserves both; a's election is revoked after the timeout.
	if err := c3.Start(ctx, sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, src.Client(), pods["a"], reservation.ReasonElectionRevoked, "c2")
	boundInC3 := func(name string) {
		t.Helper()
		waitPod(t, src.Client(), placementNS, name, name+" bound to c3's virtual node", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == protocol.VirtualNodeName("", "c3")
		})
	}
	boundInC3("a")
	boundInC3("b")

	// c waits on c2 until c2 is deleted: its drain deletes c's candidate,
	// and once the ClusterTarget is gone the election is released.
	if err := c3.Stop(sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	electInC2("c")
	if err := src.CRClient().Delete(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "c2"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "ClusterTarget c2 gone", func() (bool, string) {
		err := src.CRClient().Get(ctx, client.ObjectKey{Name: "c2"}, &v1alpha1.ClusterTarget{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	if err := c3.Start(ctx, sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	boundInC3("c")
	// The revoked candidate is gone for good, and so is every other
	// candidate in c2 once the pods are bound.
	waitFor(t, 30*time.Second, "no candidate left in c2", func() (bool, string) {
		list, err := c2Pods.List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, p := range list.Items {
			left = append(left, fmt.Sprintf("%s (uid %s, node %q)", p.Name, p.UID, p.Spec.NodeName))
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
}

// TestLosersAreDenied holds a pod's election in c2, where no scheduler
// acts on it, while its candidate in c3 reserves c3's only node: once the
// election has stood for placement.denyAfter, the source denies the
// candidate in c3, whose scheduler then rejects its reservation and makes
// none, so a pod of c3's own gets the node at once instead of after the
// Permit timeout (and again after each). When the election is released, the
// denial is lifted and the pod runs in c3. Without denials, c3's own pod
// waits for the Permit timeout (30 s) and the test fails; without lifting,
// the pod stays Pending.
func TestLosersAreDenied(t *testing.T) {
	t.Parallel()
	src, c2, c3 := stalledTargets(t, "2", "agent.denyAfter=8s", "agent.electionTimeout=0s")
	ctx := t.Context()
	c2Pods, c3Pods := c2.Client().CoreV1().Pods(placementNS), c3.Client().CoreV1().Pods(placementNS)
	pod, err := src.Client().CoreV1().Pods(placementNS).Create(ctx, optedInPod("web", "1500m"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	candidateOf := func(pods corev1client.PodInterface, what string, ok func(*corev1.Pod, protocol.State) bool) *corev1.Pod {
		t.Helper()
		var cand *corev1.Pod
		waitFor(t, 60*time.Second, what, func() (bool, string) {
			list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(pod.UID)})
			if err != nil || len(list.Items) != 1 {
				return false, fmt.Sprintf("%d candidates (%v)", len(list.Items), err)
			}
			cand = &list.Items[0]
			var st protocol.State
			_ = json.Unmarshal([]byte(cand.Annotations[protocol.StateAnnotation]), &st)
			return ok(cand, st), fmt.Sprintf("state %+v, denied %q, node %q", st, cand.Annotations[protocol.DeniedAnnotation], cand.Spec.NodeName)
		})
		return cand
	}
	// c2 reports a reservation (the test writes it) and is elected; then
	// c3's scheduler reserves c3's node for the pod, a loser.
	candidateOf(c3Pods, "the candidate in c3", func(*corev1.Pod, protocol.State) bool { return true })
	stale := candidateOf(c2Pods, "the candidate in c2", func(*corev1.Pod, protocol.State) bool { return true })
	reportReserved(t, c2Pods, stale.Name, "held", 1000)
	waitPod(t, src.Client(), placementNS, pod.Name, "elected in c2", func(p *corev1.Pod) bool {
		e, err := protocol.ParseElection(p.Annotations[protocol.ElectionAnnotation])
		return err == nil && e.Target == "c2"
	})
	if err := c3.Start(ctx, sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	candidateOf(c3Pods, "the candidate reserved in c3", func(c *corev1.Pod, st protocol.State) bool {
		if c.Annotations[protocol.DeniedAnnotation] != "" {
			t.Fatalf("denied before it could reserve: the election stood less than placement.denyAfter")
		}
		return st.Phase == protocol.PhaseReserved
	})
	candidateOf(c3Pods, "the candidate in c3 denied and turned away by its scheduler", func(c *corev1.Pod, st protocol.State) bool {
		return c.Annotations[protocol.DeniedAnnotation] != "" && st.Phase == protocol.PhaseUnreserved && strings.Contains(st.Reason, protocol.DeniedMessage)
	})
	// The node is free: a pod of c3's own that needs most of it runs, well
	// before the 30 s Permit timeout would have freed it.
	local := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "local", Namespace: placementNS},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}}}}},
	}
	if _, err := c3Pods.Create(ctx, local, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "c3's own pod bound to the node the denied candidate left", func() (bool, string) {
		p, err := c3Pods.Get(ctx, local.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName != "", fmt.Sprintf("node %q conditions %+v", p.Spec.NodeName, p.Status.Conditions)
	})
	if err := c3Pods.Delete(ctx, local.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	// The election is released once c2's candidate goes: the denial is
	// lifted, and the pod runs in c3.
	if err := c2Pods.Delete(ctx, stale.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &stale.UID}}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, src.Client(), placementNS, pod.Name, "bound to c3's virtual node", func(p *corev1.Pod) bool {
		return p.Spec.NodeName == protocol.VirtualNodeName("", "c3")
	})
}

// stalledTargets starts src, whose agent (with extra flags) targets c2 and
// c3, each one node of cpu CPUs whose Flotilla scheduler is stopped, with
// placementNS opted in everywhere.
func stalledTargets(t *testing.T, cpu string, values ...string) (src, c2, c3 *sandbox.Cluster) {
	t.Helper()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "c2", Nodes: []sandbox.NodeSpec{{CPU: cpu}}},
		{Name: "c3", Nodes: []sandbox.NodeSpec{{CPU: cpu}}},
	}})
	src, c2, c3 = s.Cluster("src"), s.Cluster("c2"), s.Cluster("c3")
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	for _, c := range []*sandbox.Cluster{c2, c3} {
		if err := c.Stop(sandbox.CandidateScheduler); err != nil {
			t.Fatal(err)
		}
		// A scheduler stopped as it starts may have created its Lease
		// without learning so (the create was in flight): restarted, it
		// would wait out that lease (15 s) before scheduling. Its process
		// gone, it holds nothing.
		err := c.Client().CoordinationV1().Leases(sandbox.ReleaseNamespace).Delete(t.Context(), "flotilla-scheduler", metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	if _, err := sandbox.StartAgent(t.Context(), src, []*sandbox.Cluster{c2, c3}, values...); err != nil {
		t.Fatal(err)
	}
	return src, c2, c3
}

// reportReserved writes on a candidate the report of a reservation nonce
// that its target's scheduler would write, for a scheduler that is gone.
func reportReserved(t *testing.T, pods corev1client.PodInterface, name, nonce string, score int64) {
	t.Helper()
	state, err := json.Marshal(protocol.State{Phase: protocol.PhaseReserved, Nonce: nonce, Node: "node-0", Score: score})
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{protocol.StateAnnotation: string(state)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestStaleCacheKeepsTheLivePod cuts the agent off from its own API server
// (a forwarder that stops every byte) once pod db-0 runs in c2, then
// deletes db-0 and creates it again, and puts the new pod's candidate in
// c2 (as the agent would have, built by the same code). The agent sees the
// candidate, but its cache still holds the old db-0, bound: deleting the
// candidates of "other" pods of that name on that view would delete the
// live pod's. It must first read the live pod, which it cannot until the
// forwarder heals; then the new pod runs on that very candidate. Without
// the live read, the agent deletes the candidate during the cut, and the
// pod ends up on another one.
func TestStaleCacheKeepsTheLivePod(t *testing.T) {
	t.Parallel()
	src, c2 := twoClusters(t, "4")
	ctx := t.Context()
	cut, err := sandbox.NewForwarder(strings.TrimPrefix(src.Host, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cut.Close)
	agent, err := sandbox.StartAgentWith(ctx, src, []*sandbox.Cluster{c2}, sandbox.ReleaseOptions{
		AgentServer: "https://" + cut.Addr(),
		// Cut off, a leader could not renew its lease: the one agent
		// runs without leader election.
		Set: []string{"agent.leaderElection.enabled=false"},
	})
	if err != nil {
		t.Fatal(err)
	}
	srcPods, c2Pods := src.Client().CoreV1().Pods(placementNS), c2.Client().CoreV1().Pods(placementNS)
	old, err := srcPods.Create(ctx, optedInPod("db-0", "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, src.Client(), placementNS, old.Name, "bound to c2's virtual node", func(p *corev1.Pod) bool { return p.Spec.NodeName == protocol.VirtualNodeName("", "c2") })

	cut.Blackhole()
	if err := srcPods.Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the old db-0 gone", func() (bool, string) {
		p, err := srcPods.Get(ctx, old.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("uid %s, err %v", p.UID, err)
	})
	// The webhook still answers the API server: the new pod is a source pod.
	fresh, err := srcPods.Create(ctx, optedInPod("db-0", "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cand, err := flotillacandidate.Build(fresh, src.Name, c2.Name, placementNS, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if cand, err = c2Pods.Create(ctx, cand, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent's cache of c2 holds the old delegate and the new candidate;
	// the candidate's event sends db-0 to a reconcile that sees the old
	// pod. Without the live read, it deletes the candidate now; with it,
	// it waits on the read.
	waitFor(t, 30*time.Second, "the agent's cache of c2 holding both candidates of db-0, and its reconcile under way", func() (bool, string) {
		body, err := get(http.DefaultClient, "http://"+agent.MetricsAddr+"/metrics", "")
		if err != nil {
			return false, err.Error()
		}
		m := parseMetrics(body)
		cached, _ := m.value(`flotilla_target_candidates{target="c2"}`)
		busy, _ := m.value(`controller_runtime_active_workers{controller="placement"}`)
		if _, err := c2Pods.Get(ctx, cand.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return true, "" // deleted already: the check below says so
		}
		return cached == 2 && busy >= 1, fmt.Sprintf("%v candidates cached, %v reconciles under way", cached, busy)
	})
	cut.Heal()

	waitPod(t, src.Client(), placementNS, fresh.Name, "the new db-0 bound to c2's virtual node", func(p *corev1.Pod) bool {
		return p.UID == fresh.UID && p.Spec.NodeName == protocol.VirtualNodeName("", "c2")
	})
	waitFor(t, 30*time.Second, "the new db-0's delegate the candidate made during the cut, the old delegate gone", func() (bool, string) {
		list, err := c2Pods.List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, p := range list.Items {
			seen = append(seen, fmt.Sprintf("%s (uid %s, source %s, node %q)", p.Name, p.UID, p.Labels[protocol.SourceUIDLabel], p.Spec.NodeName))
		}
		return len(list.Items) == 1 && list.Items[0].UID == cand.UID && list.Items[0].Spec.NodeName != "",
			fmt.Sprintf("want only %s (uid %s), bound; have %v", cand.Name, cand.UID, seen)
	})
}

// TestTooLargeForATarget places pods through two invited targets whose
// ClusterSummaries tell how much one node has free: a pod larger than any
// node of small goes to large alone, and small never gets its candidate;
// a pod larger than any node of both still gets a candidate in each (their
// nodes may grow). Without the check, small gets a candidate of the first
// pod too, and the FannedOut Event names both targets.
func TestTooLargeForATarget(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "small", Nodes: []sandbox.NodeSpec{{CPU: "2"}}},
		{Name: "large", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
	}})
	ctx := t.Context()
	src, small, large := s.Cluster("src"), s.Cluster("small"), s.Cluster("large")
	createNamespace(t, src.Client(), placementNS)
	for _, c := range []*sandbox.Cluster{small, large, src} {
		if _, err := sandbox.StartAgent(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*sandbox.Cluster{small, large} {
		invite(t, src, c)
		// The virtual node's capacity comes from the target's summary:
		// once it shows the node's CPU, the source has read it.
		waitNode(t, src.Client(), protocol.VirtualNodeName("", c.Name), 60*time.Second, "with the capacity of "+c.Name+"'s summary", func(n *corev1.Node) bool {
			return n.Status.Allocatable.Cpu().Value() == map[string]int64{"small": 2, "large": 8}[c.Name]
		})
	}
	srcPods := src.Client().CoreV1().Pods(placementNS)
	candidatesIn := func(c *sandbox.Cluster, pod *corev1.Pod) int {
		list, err := c.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(pod.UID)})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}

	four, err := srcPods.Create(ctx, optedInPod("four", "4"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, src.Client(), four, reservation.ReasonFannedOut, "1 of 1 targets: large; excluded small (no node has 4 cpu free (the most on one node: 2))")
	waitPod(t, src.Client(), placementNS, four.Name, "bound to large's virtual node", func(p *corev1.Pod) bool {
		return p.Spec.NodeName == protocol.VirtualNodeName("", "large")
	})
	if n := candidatesIn(small, four); n != 0 {
		t.Errorf("%d candidates of the 4-CPU pod in small", n)
	}

	huge, err := srcPods.Create(ctx, optedInPod("huge", "16"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "a candidate of the 16-CPU pod in each target", func() (bool, string) {
		a, b := candidatesIn(small, huge), candidatesIn(large, huge)
		return a == 1 && b == 1, fmt.Sprintf("%d in small, %d in large", a, b)
	})
}

// TestASilentTargetDoesNotHoldAPod: a target whose scheduler is down (its
// API server and agent up, so it takes candidates and answers none)
// beside one that cannot run the pod (no node has the label the pod
// selects) must not hold the pods whose two candidates went to them: once
// the silent target's candidate is overdue, the pod's window widens to
// the third target, small but able, as it does when both miss. The two
// large targets draw most first candidates (each publishes 32 times the
// third's room), so most of the six pods start with that pair. Without
// widening on an overdue candidate, such a pod waits for ever: a scheduler
// that crashed, or that lost its lease while its API server was away
// (TestPlacement's unreachable target, on a loaded machine), and was not
// restarted.
func TestASilentTargetDoesNotHoldAPod(t *testing.T) {
	t.Parallel()
	const disk, pods = "example.com/disk", 6
	ssd := map[string]string{disk: "ssd"}
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "miss", Nodes: []sandbox.NodeSpec{{CPU: "64"}}},
		{Name: "silent", Nodes: []sandbox.NodeSpec{{CPU: "64", Labels: ssd}}},
		{Name: "able", Nodes: []sandbox.NodeSpec{{CPU: "2", Labels: ssd}}},
	}})
	ctx := t.Context()
	src, silent := s.Cluster("src"), s.Cluster("silent")
	createNamespace(t, src.Client(), placementNS)
	if err := silent.Stop(sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	targets := []*sandbox.Cluster{s.Cluster("miss"), silent, s.Cluster("able")}
	for _, c := range append(targets, src) {
		if _, err := sandbox.StartAgent(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range targets {
		invite(t, src, c)
		// The draw weighs each target by its summary's room: once the
		// virtual node shows it, the source has read it.
		waitNode(t, src.Client(), protocol.VirtualNodeName("", c.Name), 60*time.Second, "with the capacity of "+c.Name+"'s summary", func(n *corev1.Node) bool {
			return n.Status.Allocatable.Cpu().Value() == map[string]int64{"miss": 64, "silent": 64, "able": 2}[c.Name]
		})
	}

	d := optedInDeployment("held", pods, "100m")
	d.Spec.Template.Spec.NodeSelector = ssd
	if _, err := src.Client().AppsV1().Deployments(placementNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := waitSourcePods(t, src.Client(), "app=held", pods, func(p *corev1.Pod) bool {
		return p.Spec.NodeName == protocol.VirtualNodeName("", "able") && p.Status.Phase == corev1.PodRunning
	})
	// The case under test happened: some pod held candidates in both the
	// target that missed and the silent one before it was elected in able.
	both := 0
	for i := range running {
		if among := electedAmong(t, src.Client(), &running[i]); strings.Contains(among, "miss") && strings.Contains(among, "silent") {
			both++
		}
	}
	if both == 0 {
		t.Fatalf("no pod of %d had candidates in both miss and silent: the draw did not test the silent target", pods)
	}
	t.Logf("%d of %d pods widened past a miss and a silent target", both, pods)
	waitFor(t, 30*time.Second, "no candidate left in silent", func() (bool, string) {
		list, err := silent.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d candidates left", len(list.Items))
	})
}
