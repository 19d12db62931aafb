package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// readySelfTarget creates the namespaced self Target "self" in namespace
// of c, with labels, as the cluster's admin, and returns it and its
// virtual node once it is Ready with that node.
func readySelfTarget(t *testing.T, c *sandbox.Cluster, namespace string, labels map[string]v1alpha1.LabelValue) (*v1alpha1.Target, string) {
	t.Helper()
	tg := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "self"}}
	tg.Spec.Self = true
	tg.Spec.Labels = labels
	if err := c.CRClient().Create(t.Context(), tg); err != nil {
		t.Fatal(err)
	}
	node := protocol.VirtualNodeName(namespace, "self")
	if err := c.WaitTarget(t.Context(), client.ObjectKeyFromObject(tg), 60*time.Second, func(st *v1alpha1.TargetStatus) bool {
		return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady) && st.VirtualNode == node
	}); err != nil {
		t.Fatal(err)
	}
	return tg, node
}

// TestTargetsOfOneClusterPlaceEachPodOnce: a namespaced self Target in
// team-a beside the self ClusterTarget of the same cluster. Both reach
// team-a of this cluster, and each keeps to its own candidates: every pod
// of a Deployment in team-a runs once, on one bound candidate, the other
// deleted; nothing reports a ProtocolViolation or a lost delegate, the
// ReplicaSet makes no pod beyond its replicas, and both targets say that
// they overlap. A pod of team-b gets no candidate through team-a's Target
// and hears nothing of it. A gang of four in team-a gets one candidate a
// member, not one through each target of the cluster; once it has run and
// succeeded, a second run of the same pod group binds only once its own
// four members stand elected.
func TestTargetsOfOneClusterPlaceEachPodOnce(t *testing.T) {
	t.Parallel()
	const teamA, teamB, replicas = "team-a", "team-b", 4
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", Nodes: []sandbox.NodeSpec{{CPU: "8"}, {CPU: "8"}}},
	}})
	ctx := t.Context()
	src := s.Cluster("src")
	admin := src.Client()
	for _, ns := range []string{teamA, teamB} {
		createNamespace(t, admin, ns)
	}
	if _, err := sandbox.StartAgent(ctx, src, []*sandbox.Cluster{src}); err != nil {
		t.Fatal(err)
	}
	tg, tenantNode := readySelfTarget(t, src, teamA, nil)

	t.Run("both targets report that they overlap, naming each other and the namespace", func(t *testing.T) {
		for key, names := range map[client.ObjectKey][]string{
			client.ObjectKeyFromObject(tg): {"ClusterTarget src", "namespace team-a"},
			{Name: "src"}:                  {"Target team-a/self", "namespace team-a"},
		} {
			if err := src.WaitTarget(ctx, key, 60*time.Second, func(st *v1alpha1.TargetStatus) bool {
				c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetOverlapping)
				if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonSameClusterAndNamespace {
					return false
				}
				for _, n := range names {
					if !strings.Contains(c.Message, n) {
						return false
					}
				}
				return true
			}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("every pod of team-a runs once, on one candidate, and the ReplicaSet does not churn", func(t *testing.T) {
		created := watchCreated(t, admin, teamA, "app=web")
		if _, err := admin.AppsV1().Deployments(teamA).Create(ctx, optedInDeployment("web", replicas, "100m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		onVirtualNode := func(p *corev1.Pod) bool {
			return (p.Spec.NodeName == "flotilla-src" || p.Spec.NodeName == tenantNode) && p.Status.Phase == corev1.PodRunning
		}
		placed := func() (bool, string) {
			pods, err := admin.CoreV1().Pods(teamA).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				return false, err.Error()
			}
			if len(pods.Items) != replicas {
				return false, fmt.Sprintf("%d source pods, want %d", len(pods.Items), replicas)
			}
			for i := range pods.Items {
				p := &pods.Items[i]
				if !onVirtualNode(p) {
					return false, fmt.Sprintf("pod %s on %q, %s", p.Name, p.Spec.NodeName, p.Status.Phase)
				}
				cands := candidatesOf(t, admin, teamA, p.UID)
				if len(cands) != 1 || cands[0].Spec.NodeName == "" {
					return false, fmt.Sprintf("pod %s has %d candidates (want its one delegate)", p.Name, len(cands))
				}
				want := protocol.TargetLabelValue("src")
				if p.Spec.NodeName == tenantNode {
					want = protocol.TargetLabelValue(teamA + "/self")
				}
				if got := cands[0].Labels[protocol.TargetLabel]; got != want {
					return false, fmt.Sprintf("pod %s runs on %s, its delegate is labelled target=%s, want %s", p.Name, p.Spec.NodeName, got, want)
				}
			}
			return true, ""
		}
		waitFor(t, 120*time.Second, "every pod of web Running on one delegate", placed)
		// Nothing may change any more: watch it for a while (the targets
		// probe every 10 seconds, and a target fighting over another's
		// candidate would delete it within one reconcile).
		holdsFor(t, 20*time.Second, "every pod of web Running on one delegate", placed)
		if n := created(); n != replicas {
			t.Errorf("the ReplicaSet created %d pods for %d replicas", n, replicas)
		}
		for _, e := range eventsIn(t, admin, teamA) {
			switch e.Reason {
			case "ProtocolViolation", vnode.ReasonDelegateLost:
				t.Errorf("event %s on %s/%s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
			}
		}
	})

	t.Run("a gang in team-a: one candidate a member through the two targets of the cluster, and a second run is a gang of its own", func(t *testing.T) {
		const size = 4
		candidatesOfMembers := watchCandidatesMade(t, admin, teamA)
		run := func(name string) []*corev1.Pod {
			var pods []*corev1.Pod
			for i := range size {
				p := optedInPod(fmt.Sprintf("%s-%d", name, i), "1")
				p.Labels[protocol.PodGroupLabel] = "train"
				p.Annotations = map[string]string{protocol.GangMinMemberAnnotation: fmt.Sprint(size), protocol.GangModeAnnotation: protocol.GangOneCluster}
				pods = append(pods, createPodAs(t, admin, teamA, p))
			}
			return pods
		}
		whole := func(pods []*corev1.Pod, phase corev1.PodPhase) func() (bool, string) {
			return func() (bool, string) {
				n := 0
				for _, p := range pods {
					got, err := admin.CoreV1().Pods(teamA).Get(ctx, p.Name, metav1.GetOptions{})
					if err != nil {
						return false, err.Error()
					}
					if got.Status.Phase == phase {
						n++
					}
				}
				return n == len(pods), fmt.Sprintf("%d of %d %s", n, len(pods), phase)
			}
		}
		first := run("first")
		waitFor(t, 60*time.Second, "the first run of pod group train Running", whole(first, corev1.PodRunning))
		if n := candidatesOfMembers(first); n != size {
			t.Errorf("the gang's %d members made %d candidates: the two targets of one cluster count once, one candidate a member", size, n)
		}
		// The first run ends: its delegates succeed, and the source pods
		// with them.
		for _, p := range first {
			for _, d := range candidatesOf(t, admin, teamA, p.UID) {
				d.Status.Phase = corev1.PodSucceeded
				if _, err := admin.CoreV1().Pods(teamA).UpdateStatus(ctx, &d, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		waitFor(t, 60*time.Second, "the first run Succeeded", whole(first, corev1.PodSucceeded))

		// The second run's members bind only once all four of them stand
		// elected: the finished members hold no place of the new run.
		seen := map[string]bool{}
		second := run("second")
		for _, p := range second {
			seen[p.Name] = false
		}
		w, err := admin.CoreV1().Pods(teamA).Watch(ctx, metav1.ListOptions{LabelSelector: protocol.PodGroupLabel + "=train"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		deadline := time.After(60 * time.Second)
		for bound := 0; bound < size; {
			select {
			case <-deadline:
				t.Fatalf("the second run: %d of %d bound after a minute", bound, size)
			case ev := <-w.ResultChan():
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				if _, ours := seen[p.Name]; !ours {
					continue
				}
				if e, err := protocol.ParseElection(p.Annotations[protocol.ElectionAnnotation]); err == nil && e.Elected() {
					seen[p.Name] = true
				}
				if p.Spec.NodeName == "" {
					continue
				}
				elected := 0
				for _, ok := range seen {
					if ok {
						elected++
					}
				}
				if elected < size {
					t.Fatalf("%s of the second run bound while %d of its %d members stood elected", p.Name, elected, size)
				}
				bound = 0
				for _, q := range second {
					if got, err := admin.CoreV1().Pods(teamA).Get(ctx, q.Name, metav1.GetOptions{}); err == nil && got.Spec.NodeName != "" {
						bound++
					}
				}
			}
		}
		waitFor(t, 60*time.Second, "the second run of pod group train Running", whole(second, corev1.PodRunning))
	})

	t.Run("a pod of team-b gets no candidate through team-a's Target and hears nothing of it", func(t *testing.T) {
		// Too big for any node: the pod waits, and says why.
		big := createPodAs(t, admin, teamB, optedInPod("big", "64"))
		pod := waitTenantPod(t, admin, big, "reported unschedulable", func(p *corev1.Pod) bool {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && strings.HasPrefix(c.Message, "0/") {
					return true
				}
			}
			return false
		})
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && (strings.Contains(c.Message, teamA) || !strings.HasPrefix(c.Message, "0/1 targets")) {
				t.Errorf("the pod of %s reports %q: team-a's Target is none of its targets", teamB, c.Message)
			}
		}
		for _, e := range eventsIn(t, admin, teamB) {
			if e.InvolvedObject.UID == pod.UID && strings.Contains(e.Message, teamA) {
				t.Errorf("event %s on the pod of %s names team-a's Target: %s", e.Reason, teamB, e.Message)
			}
		}
		cands := candidatesOf(t, admin, "", pod.UID)
		for _, c := range cands {
			if c.Labels[protocol.TargetLabel] != protocol.TargetLabelValue("src") || c.Namespace != teamB {
				t.Errorf("candidate %s/%s of the pod of %s, labelled target=%s", c.Namespace, c.Name, teamB, c.Labels[protocol.TargetLabel])
			}
		}
		if len(cands) != 1 {
			t.Errorf("the pod of %s has %d candidates, want the ClusterTarget's one", teamB, len(cands))
		}
	})
}

// TestNamespacedTargetToAnotherCluster: a Target of namespace shop,
// through an invitation of another cluster into shop only, places the
// namespace's pods there: bound to its own virtual node, the delegate's
// status mirrored; deleting the source pod deletes the delegate and the
// pod is gone. A pod of another namespace gets no candidate through it,
// and no NotInvited or Unschedulable message names it.
func TestNamespacedTargetToAnotherCluster(t *testing.T) {
	t.Parallel()
	const other = "elsewhere"
	src, tgt := agentsOnSourceAndTarget(t, sandbox.NodeSpec{CPU: "8"})
	ctx := t.Context()
	admin, remote := src.Client(), tgt.Client()
	createNamespace(t, admin, other)
	cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "src"}}
	cs.Spec.ClusterName = "src"
	cs.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	cs.Spec.Namespaces = []string{placementNS}
	cs.Spec.CreateNamespaces = true
	invited := inviteReady(t, tgt, cs)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: placementNS, Name: "remote-kubeconfig"}, Data: map[string][]byte{"kubeconfig": invited.kubeconfig}}
	if _, err := admin.CoreV1().Secrets(placementNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tg := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: placementNS, Name: "remote"}}
	tg.Spec.KubeconfigSecretRef = &v1alpha1.LocalSecretKeyRef{Name: secret.Name}
	if err := src.CRClient().Create(ctx, tg); err != nil {
		t.Fatal(err)
	}
	node := protocol.VirtualNodeName(placementNS, "remote")
	if err := src.WaitTarget(ctx, client.ObjectKeyFromObject(tg), 60*time.Second, func(st *v1alpha1.TargetStatus) bool {
		return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady) && st.VirtualNode == node &&
			meta.IsStatusConditionFalse(st.Conditions, v1alpha1.TargetOverlapping)
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("a pod of shop runs there, mirrored, and goes with its delegate", func(t *testing.T) {
		pod := createPodAs(t, admin, placementNS, optedInPod("web", "1"))
		running := waitTenantPod(t, admin, pod, "Running on "+node, func(p *corev1.Pod) bool {
			return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning
		})
		delegate := delegateOf(t, remote, placementNS, running)
		if delegate.Name != protocol.CandidateName("src", placementNS+"/remote", placementNS, pod.Name, string(pod.UID)) ||
			delegate.Labels[protocol.TargetLabel] != protocol.TargetLabelValue(placementNS+"/remote") {
			t.Fatalf("delegate %s labelled target=%s: not the Target's own", delegate.Name, delegate.Labels[protocol.TargetLabel])
		}
		if err := admin.CoreV1().Pods(placementNS).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the delegate and the source pod gone", func() (bool, string) {
			if _, err := remote.CoreV1().Pods(placementNS).Get(ctx, delegate.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("delegate: %v", err)
			}
			p, err := admin.CoreV1().Pods(placementNS).Get(ctx, pod.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return false, fmt.Sprintf("source pod still there (deletionTimestamp %v, phase %s)", p.DeletionTimestamp, p.Status.Phase)
		})
	})

	t.Run("a pod of another namespace gets nothing through it and hears nothing of it", func(t *testing.T) {
		pod := createPodAs(t, admin, other, optedInPod("stray", "1"))
		// The source handles the pod (the webhook made it a source pod,
		// the agent reconciles it) and says that no target takes pods of
		// its namespace; whatever it says must not name shop's Target.
		got := waitTenantPod(t, admin, pod, "Unschedulable: no target takes pods of "+other, func(p *corev1.Pod) bool {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && strings.HasPrefix(c.Message, "0/0 targets") {
					return true
				}
			}
			return false
		})
		if got.Spec.SchedulerName != protocol.SourceSchedulerName || got.Spec.NodeName != "" {
			t.Fatalf("the pod of %s is no waiting source pod: scheduler %q, node %q", other, got.Spec.SchedulerName, got.Spec.NodeName)
		}
		for _, c := range got.Status.Conditions {
			if strings.Contains(c.Message, placementNS+"/remote") {
				t.Errorf("condition %s of the pod of %s names shop's Target: %s", c.Type, other, c.Message)
			}
		}
		for _, e := range eventsIn(t, admin, other) {
			if e.InvolvedObject.UID == pod.UID && (e.Reason == "NotInvited" || strings.Contains(e.Message, placementNS+"/remote")) {
				t.Errorf("event %s on the pod of %s: %s", e.Reason, other, e.Message)
			}
		}
		if c := candidatesOf(t, remote, "", pod.UID); len(c) != 0 {
			t.Errorf("the pod of %s has candidate %s/%s in the Target's cluster", other, c[0].Namespace, c[0].Name)
		}
	})
}

// watchCreated counts the pods of namespace that selector selects created
// from now on (each UID once); the returned function reads the count.
func watchCreated(t *testing.T, c kubernetes.Interface, namespace, selector string) func() int {
	t.Helper()
	w, err := c.CoreV1().Pods(namespace).Watch(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	seen := map[types.UID]bool{}
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				mu.Lock()
				seen[p.UID] = true
				mu.Unlock()
			}
		}
	}()
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
}

// watchCandidatesMade follows the candidates made in namespace: the
// function it returns counts those made for the given source pods.
func watchCandidatesMade(t *testing.T, c kubernetes.Interface, namespace string) func([]*corev1.Pod) int {
	t.Helper()
	w, err := c.CoreV1().Pods(namespace).Watch(t.Context(), metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	made := map[string]map[types.UID]bool{} // source UID → candidates
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				mu.Lock()
				src := p.Labels[protocol.SourceUIDLabel]
				if made[src] == nil {
					made[src] = map[types.UID]bool{}
				}
				made[src][p.UID] = true
				mu.Unlock()
			}
		}
	}()
	return func(sources []*corev1.Pod) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, p := range sources {
			n += len(made[string(p.UID)])
		}
		return n
	}
}

// holdsFor fails the test if cond stops holding within d: a check that
// nothing changes, not a wait.
func holdsFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var broke string
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, d, true, func(context.Context) (bool, error) {
		ok, msg := cond()
		if !ok {
			broke = msg
		}
		return !ok, nil
	})
	if err == nil {
		t.Fatalf("%s stopped holding: %s", what, broke)
	}
}

// eventsIn lists the Events of a namespace.
func eventsIn(t *testing.T, c kubernetes.Interface, namespace string) []corev1.Event {
	t.Helper()
	list, err := c.CoreV1().Events(namespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}
