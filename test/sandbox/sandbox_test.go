package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

func twoClusters() sandbox.Options {
	return sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "c1", Nodes: []sandbox.NodeSpec{{Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}}, {}}},
		{Name: "c2", Nodes: []sandbox.NodeSpec{{CPU: "4", Memory: "8Gi"}}},
	}}
}

// TestSandbox checks the harness every other test stands on: two clusters,
// real controllers and scheduler, kwok nodes, outages, and a clean teardown.
func TestSandbox(t *testing.T) {
	ctx := t.Context()
	s := sandbox.ForTest(t, twoClusters())

	t.Run("clusters are distinct and authenticated", func(t *testing.T) {
		c1, c2 := s.Cluster("c1"), s.Cluster("c2")
		if c1.Host == c2.Host {
			t.Fatalf("both clusters serve on %s", c1.Host)
		}
		v, err := c1.Client().Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != sandbox.KubernetesVersion {
			t.Errorf("API server reports %q, want %s", v.GitVersion, sandbox.KubernetesVersion)
		}
		anon := c1.RESTConfig()
		anon.BearerToken = ""
		_, err = kubernetes.NewForConfigOrDie(anon).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err == nil {
			t.Error("anonymous client listed namespaces; authentication or RBAC is off")
		}
		nodes, err := c2.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) != 1 || nodes.Items[0].Status.Allocatable.Cpu().String() != "4" {
			t.Errorf("c2 should have one node with 4 CPUs, got %d nodes", len(nodes.Items))
		}
	})

	t.Run("deployments run on kwok nodes in each cluster", func(t *testing.T) {
		for _, c := range s.Clusters {
			client := c.Client()
			if _, err := client.AppsV1().Deployments("default").Create(ctx, deployment("web", 3, ""), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitPods(t, client, "app=web", 3, func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != ""
			})
		}
	})

	t.Run("flotilla profile is served by cmd/scheduler", func(t *testing.T) {
		client := s.Cluster("c1").Client()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "via-flotilla", Namespace: "default", Labels: map[string]string{"app": "via-flotilla"}},
			Spec: corev1.PodSpec{
				SchedulerName: "flotilla",
				Containers:    []corev1.Container{{Name: "c", Image: "registry.example/app:1"}},
			},
		}
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPods(t, client, "app=via-flotilla", 1, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
		// Events are written asynchronously after the binding.
		var reporters []string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			events, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=via-flotilla,reason=Scheduled"})
			if err != nil {
				return false, nil
			}
			reporters = reporters[:0]
			for _, e := range events.Items {
				reporters = append(reporters, e.ReportingController)
			}
			return len(reporters) == 1 && reporters[0] == "flotilla", nil
		})
		if err != nil {
			t.Errorf("want one Scheduled event reported by the flotilla profile, got reporters %v", reporters)
		}
	})

	t.Run("an API server outage fails calls and keeps data", func(t *testing.T) {
		c2 := s.Cluster("c2")
		client := c2.Client()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survivor"}, Data: map[string]string{"k": "v"}}
		if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c2.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := client.CoreV1().ConfigMaps("default").Get(short, "survivor", metav1.GetOptions{})
		cancel()
		if err == nil {
			t.Fatal("a call to a stopped API server succeeded")
		}
		// The other cluster is not affected.
		if _, err := s.Cluster("c1").Client().CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("c1 failed while c2 was down: %v", err)
		}
		if err := c2.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := client.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Data["k"] != "v" {
			t.Errorf("data changed across the outage: %v", got.Data)
		}
	})

	t.Run("a killed scheduler restarts and schedules again", func(t *testing.T) {
		c1 := s.Cluster("c1")
		if err := c1.Restart(ctx, sandbox.Scheduler); err != nil {
			t.Fatal(err)
		}
		client := c1.Client()
		if _, err := client.AppsV1().Deployments("default").Create(ctx, deployment("after-restart", 2, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPods(t, client, "app=after-restart", 2, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	})
}

// TestTeardownLeavesNoProcess stops a sandbox and checks that every process
// it started is gone, and that every start, a restart too, went through
// OnProcessStart (where the bench caps a cluster's CPU).
func TestTeardownLeavesNoProcess(t *testing.T) {
	var mu sync.Mutex
	started := map[int]string{}
	onStart := func(name string, pid int) error {
		mu.Lock()
		defer mu.Unlock()
		started[pid] = name
		return nil
	}
	s, err := sandbox.Start(t.Context(), sandbox.Options{Dir: t.TempDir(), Clusters: []sandbox.ClusterSpec{{Name: "solo", Nodes: []sandbox.NodeSpec{{}}, OnProcessStart: onStart}}})
	if err != nil {
		t.Fatal(err)
	}
	solo := s.Cluster("solo")
	if err := solo.Restart(t.Context(), sandbox.Kwok); err != nil {
		t.Fatal(err)
	}
	pids := solo.PIDs()
	if len(pids) != 6 {
		t.Fatalf("want 6 processes (etcd, apiserver, controller-manager, scheduler, kwok, the release's flotilla-scheduler), got %v", pids)
	}
	mu.Lock()
	for comp, pid := range pids {
		if name, ok := started[pid]; !ok || name != string(comp) {
			t.Errorf("%s (pid %d) started without OnProcessStart, or as %q", comp, pid, name)
		}
	}
	mu.Unlock()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for comp, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) is still there after teardown: %v", comp, pid, err)
		}
	}
	if err := s.Stop(); err != nil {
		t.Errorf("a second Stop should be a no-op: %v", err)
	}
}

func deployment(name string, replicas int32, schedulerName string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SchedulerName: schedulerName,
					Containers: []corev1.Container{{
						Name:  "app",
						Image: "registry.example/app:1",
					}},
				},
			},
		},
	}
}

func waitPods(t *testing.T, client kubernetes.Interface, selector string, want int, ok func(*corev1.Pod) bool) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		good := 0
		for i := range pods.Items {
			if ok(&pods.Items[i]) {
				good++
			}
		}
		last = fmt.Sprintf("%d of %d pods match, want %d", good, len(pods.Items), want)
		return good == want && len(pods.Items) == want, nil
	})
	if err != nil {
		t.Fatalf("pods %q: %s: %v", selector, last, err)
	}
}
