package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestJourney runs what `make demo` runs after its clusters are up, on two
// sandbox clusters with the chart installed and nothing else: a self
// target, an invitation with kubectl flotilla invite/join, a Deployment
// that outgrows its cluster and runs in both, a PlacementPolicy spreading
// another one by region with at most two pods on on-demand nodes, kubectl
// flotilla explain and status.
func TestJourney(t *testing.T) {
	// As flotilla-sandbox makes them for make demo: the third node of each
	// cluster is a spot node, the others on-demand.
	small := []sandbox.NodeSpec{
		{CPU: "4", Labels: map[string]string{protocol.DefaultCapacityNodeLabel: protocol.CapacityOnDemand}},
		{CPU: "4", Labels: map[string]string{protocol.DefaultCapacityNodeLabel: protocol.CapacityOnDemand}},
		{CPU: "4", Labels: map[string]string{protocol.DefaultCapacityNodeLabel: protocol.CapacitySpot}},
	}
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "c1", Nodes: small},
		{Name: "c2", Nodes: small},
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
	run := exec.CommandContext(t.Context(), demo, "--dir", s.Dir, "--replicas", "6")
	run.Dir = root
	run.Env = append(os.Environ(), "FLOTILLA_BIN="+s.Clusters[0].BinDir())
	out, err := run.CombinedOutput()
	t.Logf("demo output:\n%s", out)
	if err != nil {
		t.Fatalf("the journey failed: %v", err)
	}
	// 3 CPUs a pod, one per 4-CPU node: three in c1, the rest in c2. The
	// policy's Deployment: three per region (one per cluster), two pods on
	// on-demand nodes.
	for _, want := range []string{"kubectl flotilla --kubeconfig", "invite c1", "join c2", "per cluster: map[c1:3 c2:3]", "Connected",
		"per cluster: map[c1:3 c2:3]; per capacity type: map[on-demand:2 spot:4]", "Policy:    PlacementPolicy web"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the journey's output lacks %q", want)
		}
	}
}
