package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestJourney runs `make demo` as the README gives it, after its clusters
// are up: the three clusters flotilla-sandbox makes for it (sandbox.
// DemoCluster), the chart installed and nothing else, then the demo with
// its defaults: a self target, invitations with kubectl flotilla
// invite/join, a Deployment that outgrows its cluster, a PlacementPolicy
// spreading another one by region with at most two pods on on-demand
// nodes, a gang of four in one cluster, kubectl flotilla explain and
// status. Then the demo's gang scene again, twenty times with new pods:
// each gang runs whole, in one cluster, within gangRunBound, and a watch
// of the source pods that uses none of the agent's code sees no member
// bind before its whole gang stands elected. Last, a spread by zone then
// capacity type over the fleet's nodes (spreadOverPairsNodesHave).
func TestJourney(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		sandbox.DemoCluster("c1", 3), sandbox.DemoCluster("c2", 3), sandbox.DemoCluster("c3", 3),
	}})
	for _, c := range s.Clusters {
		if _, err := sandbox.StartAgent(t.Context(), c, nil); err != nil {
			t.Fatal(err)
		}
	}
	root, err := sandbox.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	demo := filepath.Join(t.TempDir(), "demo")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", demo, "./hack/demo")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	run := exec.CommandContext(t.Context(), demo, "--dir", s.Dir)
	run.Dir = root
	run.Env = append(os.Environ(), "FLOTILLA_BIN="+s.Clusters[0].BinDir())
	out, err := run.CombinedOutput()
	t.Logf("demo output:\n%s", out)
	if err != nil {
		t.Fatalf("the journey failed: %v", err)
	}
	for _, want := range []string{"kubectl flotilla --kubeconfig", "invite c1", "join c2", "join c3", "Connected",
		// The policy's Deployment: two per region (one per cluster),
		// two pods on on-demand nodes.
		"per cluster: map[c1:2 c2:2 c3:2]; per capacity type: map[on-demand:2 spot:4]", "Policy:    PlacementPolicy web",
		"Gang:      pod group train, 4 members needed at once, oneCluster"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the journey's output lacks %q", want)
		}
	}
	// Six pods of 3 CPUs on nodes of 4 CPUs: in more than one cluster.
	if !regexp.MustCompile(`per cluster: map\[c[123]:[1-3] c[123]:[1-3]( c[123]:[1-3])?\]; all 6 Running`).Match(out) {
		t.Errorf("the Deployment of six 3-CPU pods did not run over the clusters")
	}
	if !regexp.MustCompile(`per cluster: map\[c[123]:4\]; all 4 Running`).Match(out) {
		t.Errorf("the gang of four did not run whole in one cluster")
	}

	gangRuns(t, s.Cluster("c1"), buildPlugin(t), 20)
	spreadOverPairsNodesHave(t, s.Cluster("c1"))
}

// spreadOverPairsNodesHave spreads twelve pods of 100m by zone
// (ScheduleAnyway), then capacity type (DoNotSchedule, maxSkew 1) over the
// demo's fleet, whose zones have one capacity type each (two on-demand,
// one spot per cluster). kube-scheduler places all twelve on these nodes:
// every zone/capacity pair it counts has a node. A spread that counted
// every pair of the values a cluster has (a spot domain in an on-demand
// zone, with no pod ever) capped each zone at one pod and left pods
// Pending (7 of 12 placed, before the targets published the pairs their
// nodes have).
func spreadOverPairsNodesHave(t *testing.T, c1 *sandbox.Cluster) {
	const n = 12
	policy := &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "pairs", Namespace: "demo"},
		Spec: v1alpha1.PlacementPolicySpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"spread": "pairs"}},
			SpreadConstraints: []v1alpha1.SpreadConstraint{
				{TopologyKey: corev1.LabelTopologyZone, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.ScheduleAnyway},
				{TopologyKey: protocol.DefaultCapacityNodeLabel, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.DoNotSchedule},
			},
		},
	}
	if err := c1.CRClient().Create(t.Context(), policy); err != nil {
		t.Fatal(err)
	}
	d := optedInDeployment("pairs", n, "100m")
	d.Spec.Template.Labels["spread"] = "pairs"
	if _, err := c1.Client().AppsV1().Deployments("demo").Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := c1.Client().CoreV1().Pods("demo")
	waitFor(t, time.Minute, fmt.Sprintf("the %d pods spread by zone then capacity type bound", n), func() (bool, string) {
		l, err := pods.List(t.Context(), metav1.ListOptions{LabelSelector: "spread=pairs,!" + protocol.CandidateLabel})
		if err != nil {
			return false, err.Error()
		}
		on := map[string]int{}
		bound := 0
		for _, p := range l.Items {
			if p.Spec.NodeName != "" {
				on[p.Spec.NodeName]++
				bound++
			}
		}
		return bound == n, fmt.Sprintf("%d of %d bound: %v", bound, n, on)
	})
}

// gangRunBound bounds how long the demo's gang takes to run whole, from
// its members' creation, in the demo's fleet.
const gangRunBound = 60 * time.Second

// gangRunSlow is how long a run of the demo's gang may take before the
// test logs why it waits: most take about a second.
const gangRunSlow = 10 * time.Second

// gangRuns runs the demo's gang scene n times in c1's namespace demo, one
// after another with new pods: four workers of 200m, oneCluster. Each
// runs whole in one cluster within gangRunBound; one that takes longer
// than gangRunSlow is logged with what explain says of a member.
func gangRuns(t *testing.T, c1 *sandbox.Cluster, plugin string, n int) {
	const members = 4
	sizes := map[string]int{}
	for i := range n {
		sizes[fmt.Sprintf("run%d", i)] = members
	}
	watch := watchGangs(t, c1, "demo", sizes)
	pods := c1.Client().CoreV1().Pods("demo")
	var took []string
	for i := range n {
		group := fmt.Sprintf("run%d", i)
		start := time.Now()
		var names []string
		for m := range members {
			p := optedInPod(fmt.Sprintf("%s-%d", group, m), "200m")
			p.Labels[protocol.PodGroupLabel] = group
			p.Annotations = map[string]string{protocol.GangMinMemberAnnotation: fmt.Sprint(members), protocol.GangModeAnnotation: protocol.GangOneCluster}
			if _, err := pods.Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			names = append(names, p.Name)
		}
		explained := false
		waitFor(t, gangRunBound, fmt.Sprintf("gang %s (run %d of %d) to run whole", group, i+1, n), func() (bool, string) {
			if !explained && time.Since(start) > gangRunSlow {
				explained = true
				r := runPlugin(t, plugin, "--kubeconfig", c1.Kubeconfig, "explain", names[0], "-n", "demo")
				t.Logf("gang %s not whole after %s; explain %s:\n%s", group, gangRunSlow, names[0], r.stdout)
			}
			on, running := map[string]int{}, 0
			for _, name := range names {
				p, err := pods.Get(t.Context(), name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				if p.Spec.NodeName != "" {
					on[p.Spec.NodeName]++
				}
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == members && len(on) == 1, fmt.Sprintf("bound %v, %d Running", on, running)
		})
		took = append(took, time.Since(start).Round(100*time.Millisecond).String())
		watch.check(t)
		for _, name := range names {
			if err := pods.Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	watch.check(t)
	t.Logf("the demo's gang ran whole %d times of %d, each after: %s", n, n, strings.Join(took, " "))
}
