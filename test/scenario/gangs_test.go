package scenario

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/chaos"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// GangSeeds run in make test (TestGangsAgainstKubeScheduler); make
// scenarios runs the seeds of FLOTILLA_GANG_SEEDS too.
var GangSeeds = []uint64{6}

// gangBound is how long after the oracle settled Flotilla may take to
// start every gang it started: a gang that cannot be completed stands
// first for a minute without progress (docs/gangs.md) before the next
// one's turn, and a few may stand in the way.
const gangBound = 4 * time.Minute

// gangFleet is a seed's fleet and gangs: targets of a few nodes each, and
// gangs of one-CPU members, more than the fleet holds at once.
type gangFleet struct {
	// Nodes are each target's nodes' CPUs.
	Nodes [][]int
	// Gangs are the gangs' sizes, in their order of creation.
	Gangs []int
}

func drawGangFleet(seed uint64) gangFleet {
	r := rand.New(rand.NewPCG(seed, 0x9a9))
	var f gangFleet
	capacity := 0
	for range 3 {
		var nodes []int
		for range 1 + r.IntN(2) {
			cpu := 2 + r.IntN(3)
			nodes = append(nodes, cpu)
			capacity += cpu
		}
		f.Nodes = append(f.Nodes, nodes)
	}
	// Gangs until their members are half as many again as the fleet's
	// CPUs: some gangs must wait, or never start.
	for demand := 0; demand < capacity*3/2; {
		n := 2 + r.IntN(5)
		f.Gangs = append(f.Gangs, n)
		demand += n
	}
	return f
}

func (f gangFleet) String() string {
	return fmt.Sprintf("targets' node CPUs %v, gangs of %v one-CPU members", f.Nodes, f.Gangs)
}

// TestGangsAgainstKubeScheduler is the differential test of gangs, in both
// modes (anyClusters here, then oneCluster: runGangMode): a
// seed's gangs of one-CPU pods, more than the fleet holds, are placed by
// Flotilla over three targets, each joined by another kind of object (the
// source itself through a self ClusterTarget; an invited ClusterTarget; a
// namespaced Target of the namespace owners' Source: the last two reached
// with the invited identity only) in anyClusters mode, and by
// kube-scheduler's own gang scheduling (GenericWorkload on, each gang a
// PodGroup whose gang policy asks for all its members) in an oracle cluster holding every target's
// nodes. Flotilla must start, within gangBound of the oracle settling, at
// least as many gangs as the oracle started, and no member may bind
// before its whole gang stands elected (chaos.GangWatch, which uses none
// of the agent's code).
func TestGangsAgainstKubeScheduler(t *testing.T) {
	seeds := GangSeeds
	if env := os.Getenv("FLOTILLA_GANG_SEEDS"); env != "" {
		seeds = nil
		for _, f := range strings.Fields(env) {
			var s uint64
			if _, err := fmt.Sscan(f, &s); err != nil {
				t.Fatalf("FLOTILLA_GANG_SEEDS: %q: %v", f, err)
			}
			seeds = append(seeds, s)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runGangSeed(t, seed) })
	}
}

func runGangSeed(t *testing.T, seed uint64) {
	f := drawGangFleet(seed)
	t.Logf("seed %d: %s (reproduce: make scenarios SEEDS= GANG_SEEDS=%d)", seed, f, seed)
	ctx := t.Context()
	var clusters []sandbox.ClusterSpec
	oracle := sandbox.ClusterSpec{Name: OracleCluster, WithoutRelease: true, APIServerArgs: sandbox.WorkloadAPI,
		SchedulerConfig: sandbox.PlainSchedulerConfig, SchedulerArgs: sandbox.GangScheduling}
	for i, nodes := range f.Nodes {
		// The first target is the source itself.
		spec := sandbox.ClusterSpec{Name: gangTargetName(i)}
		for j, cpu := range nodes {
			n := sandbox.NodeSpec{Name: fmt.Sprintf("%s-n%d", spec.Name, j), CPU: fmt.Sprint(cpu)}
			spec.Nodes = append(spec.Nodes, n)
			// In the oracle, each node says which target's it is: a
			// oneCluster gang's members keep to one target's nodes there.
			n.Labels = map[string]string{oracleTargetLabel: spec.Name}
			oracle.Nodes = append(oracle.Nodes, n)
		}
		clusters = append(clusters, spec)
	}
	sb := sandbox.ForTest(t, sandbox.Options{Clusters: append(clusters, oracle)})
	for _, c := range sb.Clusters {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: map[string]string{protocol.NamespaceEnabledLabel: "true"}}}
		if _, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	src := sb.Cluster(SourceCluster)
	for _, c := range sb.Clusters {
		if c.Name == OracleCluster {
			continue
		}
		// The source's agent logs each election and each gang that gives
		// up its turn (verbosity 2), so that a slow or breached run can be
		// read after the fact (its logs are kept when the test fails).
		var values []string
		if c.Name == SourceCluster {
			values = append(values, "agent.verbosity=2")
		}
		if _, err := sandbox.StartAgent(ctx, c, nil, values...); err != nil {
			t.Fatal(err)
		}
	}
	// Each target by another kind of object: the source itself (a self
	// ClusterTarget, its room read from its own nodes), the admin's
	// invitation (ClusterSource, ClusterTarget), and the namespace owners'
	// (Source, Target of the namespace).
	if err := src.AddTarget(ctx, src); err != nil {
		t.Fatal(err)
	}
	if err := src.WaitTargetReady(ctx, src.Name, time.Minute); err != nil {
		t.Fatal(err)
	}
	t2, t3 := sb.Cluster(gangTargetName(1)), sb.Cluster(gangTargetName(2))
	if err := src.Invite(ctx, t2, Namespace); err != nil {
		t.Fatal(err)
	}
	if err := src.WaitTargetReady(ctx, t2.Name, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := src.JoinThroughSource(ctx, t3, Namespace, time.Minute); err != nil {
		t.Fatal(err)
	}
	// anyClusters first, then the same gangs again, oneCluster, once the
	// first have gone from both sides.
	for _, mode := range []string{protocol.GangAnyClusters, protocol.GangOneCluster} {
		t.Run(mode, func(t *testing.T) { runGangMode(t, sb, f, mode) })
		if t.Failed() {
			return
		}
	}
}

// gangTargetName is the name of the differential test's target i: the
// source itself first, then t2, t3.
func gangTargetName(i int) string {
	if i == 0 {
		return SourceCluster
	}
	return fmt.Sprintf("t%d", i+1)
}

// oracleTargetLabel names, on an oracle node, the target whose node it
// stands for.
const oracleTargetLabel = "example.com/target"

// runGangMode places the fleet's gangs in mode, named <mode's initial><i>,
// through Flotilla and in the oracle, compares, and deletes them.
func runGangMode(t *testing.T, sb *sandbox.Sandbox, f gangFleet, mode string) {
	ctx := t.Context()
	began := time.Now()
	src, oc := sb.Cluster(SourceCluster), sb.Cluster(OracleCluster).Client()
	prefix := "a"
	if mode == protocol.GangOneCluster {
		prefix = "o"
	}
	size := map[string]int{}
	for i, n := range f.Gangs {
		size[fmt.Sprintf("%s%d", prefix, i)] = n
	}
	watch, err := chaos.WatchGangs(ctx, src.Client(), Namespace, size)
	if err != nil {
		t.Fatal(err)
	}

	// The same gangs on both sides, in the same order. In the oracle, a
	// oneCluster gang's members ask to be on the nodes of one target as
	// one another (a required pod affinity on the target label, which the
	// first member meets alone), as Flotilla keeps them to one target.
	for i, n := range f.Gangs {
		name := fmt.Sprintf("%s%d", prefix, i)
		if _, err := oc.SchedulingV1beta1().PodGroups(Namespace).Create(ctx, sandbox.GangPodGroup(name, int32(n)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range f.Gangs {
		name := fmt.Sprintf("%s%d", prefix, i)
		for j := range n {
			p := gangMember(name, j)
			sandbox.InSchedulingGroup(p, name)
			if mode == protocol.GangOneCluster {
				p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, TopologyKey: oracleTargetLabel,
				}}}}
			}
			if _, err := oc.CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			p = gangMember(name, j)
			p.Labels[protocol.ElectLabel] = "true"
			p.Labels[protocol.PodGroupLabel] = name
			p.Annotations = map[string]string{protocol.GangMinMemberAnnotation: fmt.Sprint(n), protocol.GangModeAnnotation: mode}
			if _, err := src.Client().CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The oracle settles: its started gangs unchanged over 15 s of
	// looks (it has no more to do once every gang it can start runs).
	var want []string
	var stableSince time.Time
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		started, err := startedGangs(ctx, oc, size)
		if err != nil {
			return false, nil
		}
		if !slices.Equal(started, want) {
			want, stableSince = started, time.Now()
		}
		return time.Since(stableSince) > 15*time.Second, nil
	})
	if err != nil {
		t.Fatalf("the oracle never settled: %v (started %v)", err, want)
	}
	t.Logf("kube-scheduler started %d of %d gangs (%s): %v (settled %.0f s in)", len(want), len(f.Gangs), mode, want, time.Since(began).Seconds())
	if len(want) == 0 {
		t.Fatal("the oracle started no gang: the seed tests nothing")
	}
	if mode == protocol.GangOneCluster {
		if split := splitGangs(ctx, t, oc, want, func(p *corev1.Pod) string { return targetOfOracleNode(ctx, t, oc, p.Spec.NodeName) }); split != "" {
			t.Fatalf("the oracle split a oneCluster gang over targets: %s", split)
		}
	}

	var got []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, gangBound, true, func(context.Context) (bool, error) {
		if b := watch.Breach(); b != "" {
			return false, fmt.Errorf("partial gang: %s", b)
		}
		started, err := startedGangs(ctx, src.Client(), size)
		if err != nil {
			return false, nil
		}
		got = started
		return len(got) >= len(want), nil
	})
	if err != nil {
		t.Fatalf("Flotilla started %d gangs %v within %s of the oracle settling, kube-scheduler %d %v: %v", len(got), got, gangBound, len(want), want, err)
	}
	t.Logf("Flotilla started %d gangs: %v (%.0f s in)", len(got), got, time.Since(began).Seconds())
	if b := watch.Breach(); b != "" {
		t.Fatalf("partial gang: %s", b)
	}
	// No gang is left running in part: a member elected with the rest of
	// its gang whose target then let its reservation go leaves its gang
	// short for good (the started count alone misses it when another
	// gang starts in its place). Members still binding finish within
	// seconds.
	var partial string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(context.Context) (bool, error) {
		partial = watch.Partial()
		return partial == "", nil
	})
	if err != nil {
		t.Fatalf("a gang stays partial: %s", partial)
	}
	if mode == protocol.GangOneCluster {
		// A source pod's node is its target's virtual node.
		if split := splitGangs(ctx, t, src.Client(), got, func(p *corev1.Pod) string { return p.Spec.NodeName }); split != "" {
			t.Fatalf("Flotilla split a oneCluster gang over targets: %s", split)
		}
	}

	// Both sides let go of the gangs before the next mode.
	for _, c := range []kubernetes.Interface{src.Client(), oc} {
		if err := c.CoreV1().Pods(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := oc.SchedulingV1beta1().PodGroups(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		for _, c := range sb.Clusters {
			l, err := c.Client().CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
			if err != nil || len(l.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the gangs of %s never left every cluster: %v", mode, err)
	}
	t.Logf("every cluster let go of the gangs %.0f s in", time.Since(began).Seconds())
}

// splitGangs names a started gang whose members place says are in more
// than one target, "" when none is.
func splitGangs(ctx context.Context, t *testing.T, c kubernetes.Interface, gangs []string, place func(*corev1.Pod) string) string {
	l, err := c.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	where := map[string]map[string]bool{}
	for i := range l.Items {
		p := &l.Items[i]
		g := p.Labels["app"]
		if !slices.Contains(gangs, g) || p.Spec.NodeName == "" || p.Labels[protocol.CandidateLabel] != "" {
			continue
		}
		if where[g] == nil {
			where[g] = map[string]bool{}
		}
		where[g][place(p)] = true
	}
	for _, g := range gangs {
		if len(where[g]) > 1 {
			return fmt.Sprintf("%s in %v", g, slices.Sorted(maps.Keys(where[g])))
		}
	}
	return ""
}

// targetOfOracleNode is the target whose node an oracle node stands for.
func targetOfOracleNode(ctx context.Context, t *testing.T, oc kubernetes.Interface, node string) string {
	n, err := oc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Labels[oracleTargetLabel]
}

// gangMember is member j of gang name, one CPU.
func gangMember(name string, j int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, j), Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "worker", Image: "registry.example/worker:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		}}},
	}
}

// startedGangs are the gangs of size whose every member is bound, sorted;
// a gang partly bound is an error (the oracle's, or Flotilla's).
func startedGangs(ctx context.Context, c kubernetes.Interface, size map[string]int) ([]string, error) {
	l, err := c.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	bound := map[string]int{}
	for _, p := range l.Items {
		// A self target's candidates share the source pods' namespace.
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Labels[protocol.CandidateLabel] == "" {
			bound[p.Labels["app"]]++
		}
	}
	var started []string
	for g, n := range size {
		if bound[g] >= n {
			started = append(started, g)
		}
	}
	slices.Sort(started)
	return started, nil
}
