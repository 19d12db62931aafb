package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const placementNS = "shop"

// placementSandbox is c1 (source, and its own target), c2 with room for five
// one-CPU pods, and c3; c1's agent targets all three.
func placementSandbox(t *testing.T) (*sandbox.Sandbox, *sandbox.Agent) {
	t.Helper()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "c1", Nodes: []sandbox.NodeSpec{{CPU: "8"}, {CPU: "8"}}},
		{Name: "c2", Nodes: []sandbox.NodeSpec{{CPU: "5"}}},
		{Name: "c3", Nodes: []sandbox.NodeSpec{{CPU: "16"}, {CPU: "16"}}},
	}})
	ctx := t.Context()
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	agent, err := sandbox.StartAgent(ctx, s.Cluster("c1"), s.Clusters)
	if err != nil {
		t.Fatal(err)
	}
	return s, agent
}

// TestPlacement drives the whole protocol on three real clusters.
func TestPlacement(t *testing.T) {
	t.Parallel()
	s, agent := placementSandbox(t)
	ctx := t.Context()
	c1 := s.Cluster("c1").Client()

	t.Run("30 replicas land once each, within capacity", func(t *testing.T) {
		if _, err := c1.AppsV1().Deployments(placementNS).Create(ctx, optedInDeployment("web", 30, "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		sources := waitSourcePods(t, c1, "app=web", 30, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && strings.HasPrefix(p.Spec.NodeName, "flotilla-")
		})
		// The webhook dropped their managedFields, and their elections,
		// bindings and mirrored statuses did not bring them back: the API
		// server tracks no manager of a source pod (the chart's default).
		for _, p := range sources {
			if len(p.ManagedFields) > 0 {
				t.Errorf("source pod %s has managedFields: %+v", p.Name, p.ManagedFields)
			}
		}
		// Settled: every source pod has exactly one candidate left, bound on
		// the cluster its virtual node names.
		waitFor(t, 60*time.Second, "one bound candidate per source pod and no other", func() (bool, string) {
			return checkOneDelegateEach(ctx, s, sources)
		})
		perCluster := map[string]int{}
		for _, p := range sources {
			perCluster[strings.TrimPrefix(p.Spec.NodeName, "flotilla-")]++
		}
		if perCluster["c2"] > 5 {
			t.Errorf("c2 has room for 5 pods but runs %d", perCluster["c2"])
		}
		t.Logf("placement: %v", perCluster)
		for _, c := range s.Clusters {
			checkNoOvercommit(t, c.Client())
			// Their scheduler cleared the delegates' managedFields with
			// their Reserved state, and neither the allowance, the binding
			// nor the status brought them back. A delegate bound on a
			// pre-allowance has no state patched (its binding carries
			// Bound): it keeps them.
			delegates, err := c.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
			if err != nil {
				t.Fatal(err)
			}
			cleared := 0
			for _, d := range delegates.Items {
				if a, err := protocol.ParseAllowance(d.Annotations[protocol.AllowedAnnotation]); err == nil && a.PreAllows() {
					continue
				}
				cleared++
				if len(d.ManagedFields) > 0 {
					t.Errorf("%s: delegate %s, allowed on its reservation, has managedFields: %+v", c.Name, d.Name, d.ManagedFields)
				}
			}
			t.Logf("%s: the managedFields of %d of %d delegates checked (the others bound on a pre-allowance)", c.Name, cleared, len(delegates.Items))
			// The candidates c1 did not elect were deleted while they
			// waited in Permit: their scheduler says nothing about them.
			evs, err := c.Client().CoreV1().Events(placementNS).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs.Items {
				// The framework's word for a waiting pod deleted, and the
				// plugin's for its candidate.
				if strings.HasSuffix(ev.Message, " removed.") || strings.Contains(ev.Message, "candidate deleted") {
					t.Errorf("%s: FailedScheduling on %s, deleted by its source while it waited: %q", c.Name, ev.InvolvedObject.Name, ev.Message)
				}
			}
		}
	})

	t.Run("a pod that fits nowhere waits with reasons, then runs when a node appears", func(t *testing.T) {
		pod := optedInPod("huge", "24")
		if _, err := c1.CoreV1().Pods(placementNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "a NoTargetAvailable event naming every target", func() (bool, string) {
			evs, err := c1.CoreV1().Events(placementNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=huge,reason=NoTargetAvailable"})
			if err != nil || len(evs.Items) == 0 {
				return false, fmt.Sprintf("no event yet (%v)", err)
			}
			msg := evs.Items[len(evs.Items)-1].Message
			for _, c := range []string{"c1:", "c2:", "c3:"} {
				if !strings.Contains(msg, c) {
					return false, "event lacks " + c + ": " + msg
				}
			}
			return strings.Contains(msg, "Insufficient cpu"), msg
		})
		got, err := c1.CoreV1().Pods(placementNS).Get(ctx, "huge", metav1.GetOptions{})
		if err != nil || got.Spec.NodeName != "" {
			t.Fatalf("the pod must stay Pending, got node %q (%v)", got.Spec.NodeName, err)
		}
		// What autoscalers, kubectl and alerting read: the condition
		// kube-scheduler sets on a pod no node can run.
		var scheduled *corev1.PodCondition
		for i, c := range got.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				scheduled = &got.Status.Conditions[i]
			}
		}
		if scheduled == nil || scheduled.Status != corev1.ConditionFalse || scheduled.Reason != corev1.PodReasonUnschedulable ||
			!strings.HasPrefix(scheduled.Message, "0/3 targets can run the pod: ") || !strings.Contains(scheduled.Message, "Insufficient cpu") {
			t.Fatalf("PodScheduled of a pod no target can run: %+v, want False, Unschedulable, each target's reason", scheduled)
		}
		if err := s.Cluster("c3").AddNode(ctx, sandbox.NodeSpec{Name: "c3-big", CPU: "64"}); err != nil {
			t.Fatal(err)
		}
		waitSourcePods(t, c1, "app=huge", 1, func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-c3" && p.Status.Phase == corev1.PodRunning
		})
	})

	t.Run("a source pod without its opt-in label stays a source pod", func(t *testing.T) {
		// The label asks for multi-cluster scheduling at creation. Taken
		// off later, it must change nothing: an agent that lost sight of
		// the pod would delete its delegate while it runs on, and nobody
		// would finish its deletion (it would stay Terminating forever).
		huge, err := c1.CoreV1().Pods(placementNS).Get(ctx, "huge", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, protocol.ElectLabel)
		if _, err := c1.CoreV1().Pods(placementNS).Patch(ctx, "huge", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("removing the opt-in label: %v", err)
		}
		if err := c1.CoreV1().Pods(placementNS).Delete(ctx, "huge", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c3 := s.Cluster("c3").Client()
		waitFor(t, 60*time.Second, "the source pod and its delegate gone", func() (bool, string) {
			_, errS := c1.CoreV1().Pods(placementNS).Get(ctx, "huge", metav1.GetOptions{})
			delegates, err := c3.CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(huge.UID)})
			if err != nil {
				return false, err.Error()
			}
			return apierrors.IsNotFound(errS) && len(delegates.Items) == 0, fmt.Sprintf("source: %v, delegates left: %d", errS, len(delegates.Items))
		})
	})

	t.Run("a pod that did not opt in is untouched", func(t *testing.T) {
		// It asks for no CPU: the 30 replicas above may have filled c1,
		// the source's own target, to its last CPU.
		pod := optedInPod("plain", "0")
		delete(pod.Labels, protocol.ElectLabel)
		if _, err := c1.CoreV1().Pods(placementNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitSourcePods(t, c1, "app=plain", 1, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })[0]
		if got.Spec.SchedulerName != corev1.DefaultSchedulerName || strings.HasPrefix(got.Spec.NodeName, "flotilla-") || sourcespec.Saved(&got) {
			t.Errorf("pod not opted in was changed: scheduler %q node %q", got.Spec.SchedulerName, got.Spec.NodeName)
		}
	})

	t.Run("an unreachable target does not stall the others", func(t *testing.T) {
		c2 := s.Cluster("c2")
		if err := c2.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		if _, err := c1.AppsV1().Deployments(placementNS).Create(ctx, optedInDeployment("resilient", 6, "100m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		sources := waitSourcePods(t, c1, "app=resilient", 6, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && (p.Spec.NodeName == "flotilla-c1" || p.Spec.NodeName == "flotilla-c3")
		})
		if err := c2.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "one delegate per pod once c2 is back", func() (bool, string) {
			return checkOneDelegateEach(ctx, s, sources)
		})
	})

	t.Run("an agent killed mid-burst resumes without a second delegate", func(t *testing.T) {
		burstWithRestart(t, s, "restart", func() {
			crashAgent(t, agent)
		})
	})

	t.Run("target schedulers killed mid-burst leave one delegate per pod", func(t *testing.T) {
		// Every reservation held in memory is lost; waiting pods go back to
		// the queue and reserve again with new nonces.
		burstWithRestart(t, s, "sched-restart", func() {
			for _, name := range []string{"c1", "c3"} {
				if err := s.Cluster(name).Restart(ctx, sandbox.CandidateScheduler); err != nil {
					t.Fatal(err)
				}
			}
		})
	})

	t.Run("deleting the deployment leaves no candidate or delegate", func(t *testing.T) {
		if err := c1.AppsV1().Deployments(placementNS).Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "no candidate of app=web in any target", func() (bool, string) {
			left := 0
			for _, c := range s.Clusters {
				pods, err := c.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
				if err != nil {
					return false, err.Error()
				}
				for i := range pods.Items {
					if ofApp(&pods.Items[i], "web") {
						left++
					}
				}
			}
			return left == 0, fmt.Sprintf("%d candidates left", left)
		})
	})
}

// burstWithRestart creates a Deployment of 12 opted-in replicas, calls
// restart as soon as one of its pods has an election, and checks that every
// pod ends Running with exactly one delegate.
func burstWithRestart(t *testing.T, s *sandbox.Sandbox, name string, restart func()) {
	t.Helper()
	ctx := t.Context()
	c1 := s.Cluster("c1").Client()
	if _, err := c1.AppsV1().Deployments(placementNS).Create(ctx, optedInDeployment(name, 12, "100m"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "a first election", func() (bool, string) {
		pods, err := c1.CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name + ",!" + protocol.CandidateLabel})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.Annotations[protocol.ElectionAnnotation] != "" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods, none elected", len(pods.Items))
	})
	restart()
	sources := waitSourcePods(t, c1, "app="+name, 12, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && strings.HasPrefix(p.Spec.NodeName, "flotilla-")
	})
	waitFor(t, 60*time.Second, "one delegate per pod after the restart", func() (bool, string) {
		return checkOneDelegateEach(ctx, s, sources)
	})
}

// crashAgent kills an agent with SIGKILL, as a crash would, starts it
// again and waits until it is ready.
func crashAgent(t *testing.T, a *sandbox.Agent) {
	t.Helper()
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func optedInDeployment(name string, replicas int32, cpu string) *appsv1.Deployment {
	pod := optedInPod(name, cpu)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}
}

func optedInPod(name, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name, protocol.ElectLabel: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:      "app",
			Image:     "registry.example/app:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}}},
	}
}

// twoClusters starts the fleet most tests need: a source without a
// scheduler and one target, c2, of one node of cpu CPUs, each with the
// namespace placementNS. No agent runs yet (sourceAndTarget starts one).
func twoClusters(t *testing.T, cpu string) (src, c2 *sandbox.Cluster) {
	t.Helper()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "c2", Nodes: []sandbox.NodeSpec{{CPU: cpu}}},
	}})
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	return s.Cluster("src"), s.Cluster("c2")
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	start := time.Now()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, msg := cond()
		if msg != last && os.Getenv("FLOTILLA_WAIT_LOG") != "" {
			t.Logf("%s: %s: %s", time.Since(start).Round(100*time.Millisecond), what, msg)
		}
		last = msg
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %s: %v", what, last, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("%s after %s", what, d.Round(100*time.Millisecond))
	}
}

func waitSourcePods(t *testing.T, client kubernetes.Interface, selector string, want int, ok func(*corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, 120*time.Second, fmt.Sprintf("%d pods %s", want, selector), func() (bool, string) {
		list, err := client.CoreV1().Pods(placementNS).List(t.Context(), metav1.ListOptions{LabelSelector: selector + ",!" + protocol.CandidateLabel})
		if err != nil {
			return false, err.Error()
		}
		good := 0
		for i := range list.Items {
			if ok(&list.Items[i]) {
				good++
			}
		}
		pods = list.Items
		return good == want && len(list.Items) == want, fmt.Sprintf("%d of %d match", good, len(list.Items))
	})
	return pods
}

// checkOneDelegateEach verifies invariant 1 on settled state: one candidate
// per source pod across all targets, bound, in the cluster the source pod's
// virtual node names.
func checkOneDelegateEach(ctx context.Context, s *sandbox.Sandbox, sources []corev1.Pod) (bool, string) {
	byUID := map[string][]string{}
	for _, c := range s.Clusters {
		pods, err := c.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Spec.NodeName == "" {
				return false, fmt.Sprintf("unbound candidate %s left in %s", p.Name, c.Name)
			}
			byUID[p.Labels[protocol.SourceUIDLabel]] = append(byUID[p.Labels[protocol.SourceUIDLabel]], c.Name)
		}
	}
	for _, src := range sources {
		got := byUID[string(src.UID)]
		if len(got) != 1 {
			return false, fmt.Sprintf("source %s has bound candidates in %v", src.Name, got)
		}
		if "flotilla-"+got[0] != src.Spec.NodeName {
			return false, fmt.Sprintf("source %s is on %s but its delegate runs in %s", src.Name, src.Spec.NodeName, got[0])
		}
	}
	return true, ""
}

func checkNoOvercommit(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	nodes, err := client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := client.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int64{}
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			used[p.Spec.NodeName] += c.Resources.Requests.Cpu().MilliValue()
		}
	}
	for _, n := range nodes.Items {
		if strings.HasPrefix(n.Name, "flotilla-") {
			continue
		}
		if alloc := n.Status.Allocatable.Cpu().MilliValue(); used[n.Name] > alloc {
			t.Errorf("node %s overcommitted: %dm requested of %dm", n.Name, used[n.Name], alloc)
		}
	}
}
