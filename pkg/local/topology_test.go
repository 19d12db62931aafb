package local

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flotilla-dev/flotilla/pkg/placement"
)

// TestTopologyValues: the values of the nodes that take pods, once listed;
// the first call starts the watch and is not ok yet.
func TestTopologyValues(t *testing.T) {
	zone := func(z string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Labels = map[string]string{"zone": z, "region": "r"} }
	}
	kube := fake.NewClientset(
		node("n1", "4", zone("b")),
		node("n2", "4", zone("a")),
		node("n3", "4", zone("b")),
		node("no-zone", "4", func(n *corev1.Node) { n.Labels = map[string]string{"region": "r"} }),
		node("cordoned", "4", zone("c"), func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		node("virtual", "4", zone("d"), func(n *corev1.Node) { n.Labels["type"] = "virtual-kubelet" }),
	)
	topo := NewTopology(kube)
	ctx := run(t, topo)
	keys := []string{"region", "zone"}
	if _, _, ok := topo.Of(keys); ok {
		t.Fatal("ok before the nodes were listed")
	}
	var got map[string][]string
	var combinations []placement.Combination
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var ok bool
		got, combinations, ok = topo.Of(keys)
		return ok, nil
	}); err != nil {
		t.Fatal("the nodes were never listed")
	}
	if fmt.Sprint(got) != "map[region:[r] zone:[a b]]" {
		t.Errorf("values %v, want region r and zones a, b (not the cordoned node's c, nor the virtual node's d)", got)
	}
	// Every node's combination but the virtual node's; the cordoned node's
	// is closed.
	var shown []string
	for _, c := range combinations {
		shown = append(shown, fmt.Sprintf("%v open=%v", c.Values, c.Open))
	}
	slices.Sort(shown)
	want := []string{"map[region:r zone:a] open=true", "map[region:r zone:b] open=true", "map[region:r zone:c] open=false", "map[region:r] open=true"}
	if !slices.Equal(shown, want) {
		t.Errorf("combinations %q, want %q", shown, want)
	}
}
