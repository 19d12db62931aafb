package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestGangFaults: faults while a gang waits and after it was placed, over
// two targets of four CPUs that invite the source (which reaches them with
// the invited identity alone) and where a pod of another owner takes one
// CPU of each, so that a oneCluster gang of four waits. Throughout, a watch with
// no code of the agent's checks that no member binds unless its whole
// gang stands elected (gangWatch).
//   - A member deleted while its gang waits: nothing of it is left in the
//     targets, and the others still wait for a fourth.
//   - The agent killed after two members' elections were written (the
//     elections a crash between two members' elections leaves behind, in
//     the target that held the gang's places then), with the gang short
//     of its fourth place since: restarted, the agent does not let the two
//     bind; once the room is there, the gang runs whole there, each member
//     with one candidate.
//   - A target lost after the gang was allowed: a Job's gang runs whole in
//     one target; the target's API server stops; the members are evicted
//     from its virtual node, the Job makes new ones, and they run whole in
//     the other target. Once the target is back, nothing of the lost
//     members is left there.
func TestGangFaults(t *testing.T) {
	t.Parallel()
	src, c2, c3 := gangFleet(t)
	ctx := t.Context()
	for _, c := range []*sandbox.Cluster{c2, c3} {
		fill(t, c, "1")
	}
	// Each target invites the source, which reaches it with the invited
	// identity alone, and publishes its room.
	for _, c := range []*sandbox.Cluster{c2, c3} {
		if _, err := sandbox.StartAgent(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	agent, err := sandbox.StartAgent(ctx, src, nil,
		fmt.Sprintf("agent.notReadyTolerationSeconds=%d", int(failoverToleration.Seconds())),
		"agent.virtualNodeNotReadyAfter="+failoverNotReadyAfter.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*sandbox.Cluster{c2, c3} {
		if err := src.Invite(ctx, c, placementNS); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitTargetReady(ctx, c.Name, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	pods := src.Client().CoreV1().Pods(placementNS)
	g := watchGangs(t, src, placementNS, map[string]int{"del": 4, "kill": 4, "train": 4})
	create := func(members []*corev1.Pod) {
		t.Helper()
		for _, p := range members {
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	deleteAll := func(members []*corev1.Pod) {
		t.Helper()
		for _, p := range members {
			if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, time.Minute, "the members' candidates gone from the targets", func() (bool, string) {
			n := countMembersIn(t, members, c2) + countMembersIn(t, members, c3)
			return n == 0, fmt.Sprintf("%d left", n)
		})
	}
	waitingHeld := func(members []*corev1.Pod) {
		t.Helper()
		waitFor(t, 90*time.Second, "every member waiting for its gang, with places held in both targets", func() (bool, string) {
			on, waiting, err := gangState(ctx, pods, members, "")
			if err != nil {
				return false, err.Error()
			}
			if len(on) > 0 {
				t.Fatalf("members bound: %v", on)
			}
			r2, r3 := reservedOf(t, members, c2), reservedOf(t, members, c3)
			return waiting == len(members) && r2 == 3 && r3 == 3, fmt.Sprintf("%d of %d waiting, %d reservations in c2, %d in c3", waiting, len(members), r2, r3)
		})
	}

	t.Run("a member deleted while its gang waits leaves nothing behind", func(t *testing.T) {
		del := gangPods("del", 4, 4, "")
		create(del)
		waitingHeld(del)
		gone, rest := del[3], del[:3]
		if err := pods.Delete(ctx, gone.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the deleted member's candidates gone", func() (bool, string) {
			n := countMembersIn(t, []*corev1.Pod{gone}, c2) + countMembersIn(t, []*corev1.Pod{gone}, c3)
			return n == 0, fmt.Sprintf("%d left", n)
		})
		// The three left, with room for three in each target, still wait
		// for a fourth: the gang's size is what it declares, not what is
		// left of it.
		stillWaiting(t, pods, rest, 15*time.Second)
		g.check(t)
		deleteAll(rest)
	})

	t.Run("the agent killed after two members' elections: the two do not bind alone", func(t *testing.T) {
		kill := gangPods("kill", 4, 4, "")
		create(kill)
		waitingHeld(kill)
		if err := agent.Kill(); err != nil {
			t.Fatal(err)
		}
		// What the agent wrote before the crash: two members elected on
		// the reservations c2 holds for them, as the agent's identity.
		var elected []string
		for _, cand := range candidatesIn(t, kill, c2) {
			var st protocol.State
			if json.Unmarshal([]byte(cand.Annotations[protocol.StateAnnotation]), &st) != nil || st.Phase != protocol.PhaseReserved || len(elected) == 2 {
				continue
			}
			member := memberOf(kill, cand)
			e := protocol.Election{Generation: 1, Target: c2.Name, Nonce: st.Nonce}.Encode()
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, protocol.ElectionAnnotation, e)
			if _, err := asAgent(t, src).CoreV1().Pods(placementNS).Patch(ctx, member, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			elected = append(elected, member)
		}
		if len(elected) != 2 {
			t.Fatalf("elected %v by hand, want two members reserved in c2", elected)
		}
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		if err := agent.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		// Until every reservation held now has ended (the targets' Permit
		// timeout, 30 s, lets it go): the two stay unbound whatever
		// becomes of their places.
		heldUntilEnded(t, "the restarted agent's gang", func() {
			if on, _, err := gangState(ctx, pods, kill, ""); err == nil && len(on) > 0 {
				t.Fatalf("members bound: %v", on)
			}
		}, c2, c3)
		g.check(t)

		unfill(t, c2)
		waitFor(t, 2*time.Minute, "the gang of four bound whole in c2", func() (bool, string) {
			on, _, err := gangState(ctx, pods, kill, "")
			return err == nil && on[protocol.VirtualNodeName("", c2.Name)] == 4, fmt.Sprintf("bound: %v", on)
		})
		g.check(t)
		waitFor(t, time.Minute, "one candidate each, in c2", func() (bool, string) {
			n2, n3 := countMembersIn(t, kill, c2), countMembersIn(t, kill, c3)
			return n2 == 4 && n3 == 0, fmt.Sprintf("%d candidates in c2, %d in c3", n2, n3)
		})
		deleteAll(kill)
	})

	t.Run("a target lost after its gang was allowed: the Job's new members run whole elsewhere", func(t *testing.T) {
		jobs := src.Client().BatchV1().Jobs(placementNS)
		pod := optedInPod("train", "1")
		pod.Labels[protocol.PodGroupLabel] = "train"
		pod.Annotations = map[string]string{protocol.GangMinMemberAnnotation: "4"}
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "train"},
			Spec: batchv1.JobSpec{
				// Indexed, with a back-off per index: each index waits 10 s
				// after its member is lost, where a Job's one back-off would
				// wait 80 s after four lost at once (10 s doubled a failure).
				Parallelism: ptr.To[int32](4), Completions: ptr.To[int32](4),
				CompletionMode: ptr.To(batchv1.IndexedCompletion), BackoffLimitPerIndex: ptr.To[int32](5),
				Template: corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
			},
		}
		if _, err := jobs.Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		vc2, vc3 := protocol.VirtualNodeName("", c2.Name), protocol.VirtualNodeName("", c3.Name)
		first := waitSourcePods(t, src.Client(), "app=train", 4, func(p *corev1.Pod) bool {
			return p.Spec.NodeName == vc2 && p.Status.Phase == corev1.PodRunning
		})
		g.check(t)
		unfill(t, c3)
		if err := c2.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 3*time.Minute, "four new members of the Job running in c3, the lost ones gone", func() (bool, string) {
			l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=train"})
			if err != nil {
				return false, err.Error()
			}
			var seen []string
			in3 := 0
			for _, p := range l.Items {
				seen = append(seen, fmt.Sprintf("%s@%s:%s", p.Name, p.Spec.NodeName, p.Status.Phase))
				if p.Spec.NodeName == vc3 && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					in3++
				}
			}
			return in3 == 4 && len(l.Items) == 4, fmt.Sprintf("%v", seen)
		})
		g.check(t)
		for _, p := range first {
			if _, err := pods.Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
				t.Errorf("lost member %s still exists", p.Name)
			}
		}
		if err := c2.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, "no candidate of src left in c2", func() (bool, string) {
			l, err := c2.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceClusterLabel + "=" + src.Name})
			if err != nil {
				return false, err.Error()
			}
			return len(l.Items) == 0, fmt.Sprintf("%d left", len(l.Items))
		})
	})
}

// fill runs a pod of another owner in c's namespace default, asking cpu,
// and waits until it runs.
func fill(t *testing.T, c *sandbox.Cluster, cpu string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}}},
	}
	pods := c.Client().CoreV1().Pods("default")
	if _, err := pods.Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the filler running in "+c.Name, func() (bool, string) {
		got, err := pods.Get(t.Context(), p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == corev1.PodRunning, string(got.Status.Phase)
	})
}

// unfill deletes c's filler.
func unfill(t *testing.T, c *sandbox.Cluster) {
	t.Helper()
	if err := c.Client().CoreV1().Pods("default").Delete(t.Context(), "filler", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
}

// stillWaiting watches the members for d: none binds.
func stillWaiting(t *testing.T, pods corev1client.PodInterface, members []*corev1.Pod, d time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, d, true, func(context.Context) (bool, error) {
		for _, m := range members {
			p, err := pods.Get(t.Context(), m.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("%s bound to %s", p.Name, p.Spec.NodeName)
			}
		}
		return false, nil
	})
	if err != nil && !wait.Interrupted(err) {
		t.Fatal(err)
	}
}

// candidatesIn lists the candidates in c of the source pods members (as
// named in the source: by the source pod's name and namespace).
func candidatesIn(t *testing.T, members []*corev1.Pod, c *sandbox.Cluster) []corev1.Pod {
	t.Helper()
	l, err := c.Client().CoreV1().Pods(placementNS).List(t.Context(), metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && memberOf(members, p) != "" {
			out = append(out, p)
		}
	}
	return out
}

// memberOf names the member whose candidate cand is, "" for none.
func memberOf(members []*corev1.Pod, cand corev1.Pod) string {
	for _, m := range members {
		if cand.Annotations[protocol.SourceNameAnnotation] == m.Name {
			return m.Name
		}
	}
	return ""
}

// countMembersIn counts the members' candidates in c.
func countMembersIn(t *testing.T, members []*corev1.Pod, c *sandbox.Cluster) int {
	return len(candidatesIn(t, members, c))
}

// reservedOf counts the members' candidates in c that hold a reservation.
func reservedOf(t *testing.T, members []*corev1.Pod, c *sandbox.Cluster) int {
	n := 0
	for _, cand := range candidatesIn(t, members, c) {
		var st protocol.State
		if json.Unmarshal([]byte(cand.Annotations[protocol.StateAnnotation]), &st) == nil && st.Phase == protocol.PhaseReserved {
			n++
		}
	}
	return n
}

// asAgent is a client of c as its release's agent, the one identity the
// chart's admission policy lets write Flotilla's annotations of a pod.
func asAgent(t *testing.T, c *sandbox.Cluster) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.RESTConfig())
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + sandbox.ReleaseNamespace + ":flotilla-agent",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + sandbox.ReleaseNamespace, "system:authenticated"},
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
