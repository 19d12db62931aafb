//go:build versions

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestMixedMinors runs a fleet of clusters of different Kubernetes minors,
// as upgrades one cluster at a time make them (make test-versions, not
// make test: it needs make tools-versions and make build-schedulers). Each
// cluster runs its minor's API server and controller manager, and its
// release runs the scheduler build the chart picks from the API server's
// version; one agent build serves every cluster. First a source on the
// current minor with targets on 1.35 and 1.36, then a source on 1.35 with
// targets on 1.36 and the current minor, then a source on 1.36 with
// targets on the current minor and 1.35. Through invitations only (each
// target invites the source's managed ServiceAccount):
//   - each release's scheduler is its cluster's minor's build;
//   - a Deployment's pods are placed in the targets and run;
//   - a gang of three (oneCluster) waits with two members, and with the
//     third runs whole in one target, and no member
//     binds before its gang stands complete (a watch with none of the
//     agent's code); on a source of 1.36 or later the gang is declared
//     by a PodGroup of Kubernetes' own API in the version that minor
//     serves (v1alpha2, v1beta1) and sized there, on 1.35 by the pod-group
//     label;
//   - a target's API server stopped, its pods move to the other target.
func TestMixedMinors(t *testing.T) {
	t.Parallel()
	for _, f := range []struct{ src, c2, c3 string }{
		{sandbox.CurrentMinor(), "1.35", "1.36"},
		{"1.35", "1.36", sandbox.CurrentMinor()},
		{"1.36", sandbox.CurrentMinor(), "1.35"},
	} {
		t.Run(fmt.Sprintf("source %s, targets %s and %s", f.src, f.c2, f.c3), func(t *testing.T) {
			mixedMinors(t, f.src, f.c2, f.c3)
		})
	}
}

func mixedMinors(t *testing.T, srcMinor, c2Minor, c3Minor string) {
	// The source serves Kubernetes' PodGroup where its minor has one.
	podGroupVersion := map[string]string{"1.36": "v1alpha2", "1.37": "v1beta1"}[srcMinor]
	var srcArgs []string
	if podGroupVersion != "" {
		srcArgs = []string{"--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/" + podGroupVersion + "=true"}
	}
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", Minor: srcMinor, WithoutScheduler: true, APIServerArgs: srcArgs},
		{Name: "c2", Minor: c2Minor, Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
		{Name: "c3", Minor: c3Minor, Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
	}})
	ctx := t.Context()
	src, c2, c3 := s.Cluster("src"), s.Cluster("c2"), s.Cluster("c3")
	for c, minor := range map[*sandbox.Cluster]string{src: srcMinor, c2: c2Minor, c3: c3Minor} {
		v, err := c.Client().Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if got := v.Major + "." + strings.TrimSuffix(v.Minor, "+"); got != minor {
			t.Fatalf("%s's API server is %s, want %s", c.Name, v.GitVersion, minor)
		}
	}
	startFailoverAgents(t, src, c2, c3)
	createNamespace(t, src.Client(), placementNS)
	invite(t, src, c2)
	invite(t, src, c3)
	srcClient := src.Client()

	t.Run("each release runs its minor's scheduler", func(t *testing.T) {
		for c, minor := range map[*sandbox.Cluster]string{c2: c2Minor, c3: c3Minor} {
			deps, err := c.Client().AppsV1().Deployments(sandbox.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=scheduler"})
			if err != nil {
				t.Fatal(err)
			}
			if len(deps.Items) != 1 {
				t.Fatalf("%s: %d scheduler Deployments, want 1", c.Name, len(deps.Items))
			}
			if image := deps.Items[0].Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(image, "-k8s"+minor) {
				t.Errorf("%s runs scheduler image %s, want the build for %s", c.Name, image, minor)
			}
		}
	})

	deployment := optedInDeployment("web", 4, "1")
	deployment.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	t.Run("a Deployment's pods run in the targets", func(t *testing.T) {
		if _, err := srcClient.AppsV1().Deployments(placementNS).Create(ctx, deployment, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSourcePods(t, srcClient, "app=web", 4, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && strings.HasPrefix(p.Spec.NodeName, "flotilla-c")
		})
	})

	t.Run("a gang waits for its size and runs whole in one target", func(t *testing.T) {
		// Three of half a CPU: whatever the Deployment left, one target
		// has room for all of them.
		members := gangPods("trio", 3, 3, protocol.GangOneCluster)
		for _, m := range members {
			m.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("500m")
		}
		key := "trio"
		if podGroupVersion != "" {
			podGroups := dynamicClient(t, src).Resource(schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: podGroupVersion, Resource: "podgroups"}).Namespace(placementNS)
			pg := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "scheduling.k8s.io/" + podGroupVersion, "kind": "PodGroup",
				"metadata": map[string]any{"name": "trio"},
				"spec":     map[string]any{"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(3)}}},
			}}
			if _, err := podGroups.Create(ctx, pg, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			// Sized by the PodGroup alone.
			for _, m := range members {
				delete(m.Labels, protocol.PodGroupLabel)
				delete(m.Annotations, protocol.GangMinMemberAnnotation)
				sandbox.InSchedulingGroup(m, "trio")
			}
			key = "schedulingGroup:trio"
		}
		g := watchGangs(t, src, placementNS, map[string]int{key: 3})
		pods := srcClient.CoreV1().Pods(placementNS)
		for _, m := range members[:2] {
			if _, err := pods.Create(ctx, m, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		stillWaiting(t, pods, members[:2], 5*time.Second)
		if _, err := pods.Create(ctx, members[2], metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, "the gang of three running in one target", func() (bool, string) {
			on, _, err := gangState(ctx, pods, members, "")
			if err != nil {
				return false, err.Error()
			}
			return len(on) == 1 && podsOn(on) == 3, fmt.Sprintf("bound: %v", on)
		})
		g.check(t)
		for _, m := range members {
			if err := pods.Delete(ctx, m.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("pods of a target that stops answering move to the other", func(t *testing.T) {
		before := waitSourcePods(t, srcClient, "app=web", 4, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning
		})
		// The target that runs the most of them stops; make room in the
		// other for all four.
		on := map[string]int{}
		for _, p := range before {
			on[p.Spec.NodeName]++
		}
		lost, kept := c2, c3
		if on["flotilla-c3"] > on["flotilla-c2"] {
			lost, kept = c3, c2
		}
		if err := kept.AddNode(ctx, sandbox.NodeSpec{Name: kept.Name + "-node-added", CPU: "4"}); err != nil {
			t.Fatal(err)
		}
		if err := lost.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		waitSourcePods(t, srcClient, "app=web", 4, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "flotilla-"+kept.Name && p.DeletionTimestamp == nil
		})
		t.Logf("%d pods moved from %s (%s) to %s (%s) %s after its API server stopped", on["flotilla-"+lost.Name], lost.Name,
			map[*sandbox.Cluster]string{c2: c2Minor, c3: c3Minor}[lost], kept.Name, map[*sandbox.Cluster]string{c2: c2Minor, c3: c3Minor}[kept],
			time.Since(stopped).Round(100*time.Millisecond))
	})
}
