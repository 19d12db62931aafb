package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const (
	chaosNS = "chaos"
	// holeTarget is the cluster the others reach through a path that the
	// injector can blackhole.
	holeTarget = "c3"
	// leaseDuration of the agents' leader election: short, so that
	// hand-overs happen within a run.
	leaseDuration = 6 * time.Second
)

// config of one chaos run.
type config struct {
	seed uint64
	// faults is how long the workload runs and faults are injected.
	faults time.Duration
	// settle bounds the wait for quiescence after the last fault.
	settle time.Duration
	// binDir holds the binaries ("" for the checkout's bin/).
	binDir string
}

// configFromEnv reads FLOTILLA_CHAOS_DURATION (default 2m) and
// FLOTILLA_CHAOS_SEED (default: the time).
func configFromEnv(t *testing.T, defaultFaults time.Duration) config {
	cfg := config{seed: uint64(time.Now().UnixNano()), faults: defaultFaults, settle: 3 * time.Minute}
	if v := os.Getenv("FLOTILLA_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FLOTILLA_CHAOS_DURATION=%q: %v", v, err)
		}
		cfg.faults = d
	}
	if v := os.Getenv("FLOTILLA_CHAOS_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FLOTILLA_CHAOS_SEED=%q: %v", v, err)
		}
		cfg.seed = seed
	}
	return cfg
}

// TestChaos runs three clusters, each the source and a target of all three,
// under the seeded workload and faults, and fails on any violation the
// checker finds. FLOTILLA_CHAOS_SEED replays a run's sequence of actions and
// faults; FLOTILLA_CHAOS_DURATION sets how long faults go on.
func TestChaos(t *testing.T) {
	cfg := configFromEnv(t, 2*time.Minute)
	res := runChaos(t, cfg)
	for i, v := range res.violations {
		if i == 50 {
			t.Errorf("... and %d more", len(res.violations)-i)
			break
		}
		t.Errorf("violation: %s", v)
	}
	if len(res.violations) > 0 {
		t.Errorf("seed %d: %d violations (FLOTILLA_CHAOS_SEED=%d replays the run)", cfg.seed, len(res.violations), cfg.seed)
	}
}

// TestChaosPlantedBug runs a short chaos with an agent built with the
// flotilla_planted_bug tag, whose election allows every Reserved candidate
// (pkg/reservation/planted_bug.go): the checker must catch it. It builds
// the agent, so it runs only when FLOTILLA_CHAOS_PLANTED is set.
func TestChaosPlantedBug(t *testing.T) {
	if os.Getenv("FLOTILLA_CHAOS_PLANTED") == "" {
		t.Skip("set FLOTILLA_CHAOS_PLANTED=1 to check that the checker catches the planted bug (builds the agent with -tags flotilla_planted_bug)")
	}
	cfg := configFromEnv(t, time.Minute)
	cfg.settle = time.Minute
	cfg.binDir = PlantedBinDir(t, "flotilla_planted_bug")
	res := runChaos(t, cfg)
	got := CountByKind(res.violations)
	if got[TwoBound]+got[BoundAgain]+got[Unelected] == 0 {
		t.Fatalf("seed %d: the checker found no two-bound, bound-again or bound-without-election violation with the planted bug (violations: %v)", cfg.seed, res.violations)
	}
	t.Logf("the planted bug was caught: %s", FormatCounts(Kinds, got))
}

// result of a run.
type result struct {
	violations []Violation
}

// runChaos starts the clusters, runs the workload and the faults for
// cfg.faults, waits for quiescence and returns what the checker found.
func runChaos(t *testing.T, cfg config) result {
	start := time.Now()
	t.Logf("chaos: seed %d, %s of faults (FLOTILLA_CHAOS_SEED=%d FLOTILLA_CHAOS_DURATION=%s replays it)", cfg.seed, cfg.faults, cfg.seed, cfg.faults)
	s := sandbox.ForTest(t, sandbox.Options{BinDir: cfg.binDir, Clusters: []sandbox.ClusterSpec{
		{Name: "c1", Nodes: []sandbox.NodeSpec{{CPU: "16"}, {CPU: "16"}}},
		{Name: "c2", Nodes: []sandbox.NodeSpec{{CPU: "16"}, {CPU: "16"}}},
		{Name: "c3", Nodes: []sandbox.NodeSpec{{CPU: "16"}, {CPU: "16"}}},
	}})
	ctx := t.Context()
	clusters := map[string]*sandbox.Cluster{}
	clients := map[string]kubernetes.Interface{}
	for _, c := range s.Clusters {
		clusters[c.Name], clients[c.Name] = c, c.Client()
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chaosNS, Labels: map[string]string{protocol.NamespaceEnabledLabel: "true"}}}
		if _, err := clients[c.Name].CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	hole, err := sandbox.NewForwarder(strings.TrimPrefix(clusters[holeTarget].Host, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hole.Close)
	agents := startAgents(t, s, hole)
	t.Logf("chaos: clusters and agents up after %s (logs in %s)", time.Since(start).Round(time.Second), s.LogDir)

	checker := NewChecker()
	watchCtx, stopWatches := context.WithCancel(ctx)
	var watches []*Watch
	var watching sync.WaitGroup
	for _, c := range s.Clusters {
		w := &Watch{Cluster: c.Name, Pods: c.Client, NS: chaosNS, Checker: checker}
		watches = append(watches, w)
		watching.Go(func() { w.Run(watchCtx) })
	}
	defer func() {
		stopWatches()
		watching.Wait()
	}()

	workload := NewWorkload(cfg.seed, chaosNS, clients)
	if err := workload.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	injector := NewInjector(cfg.seed, &Injector{
		Clusters: clusters, Agents: agents, Hole: hole, HoleTarget: holeTarget, LeaseDuration: leaseDuration,
		Logf: t.Logf,
	})
	faultsStart := time.Now()
	faultCtx, stopFaults := context.WithTimeout(ctx, cfg.faults)
	var running sync.WaitGroup
	running.Go(func() { workload.Run(faultCtx, time.Second) })
	running.Go(func() { injector.Run(faultCtx) })
	running.Wait()
	stopFaults()
	faultsEnd := time.Now()
	// Recreations under way finish (or time out) before quiescence counts.
	workload.Wait()
	t.Logf("chaos: faults over after %s, recreations under way done %s later; waiting for quiescence",
		faultsEnd.Sub(start).Round(time.Second), time.Since(faultsEnd).Round(time.Second))

	// Quiescence: poll the pure check over fresh lists until it passes
	// or time runs out; what is left then is reported.
	var snap Snapshot
	var exp Expectations
	var last []Violation
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, cfg.settle, true, func(ctx context.Context) (bool, error) {
		injector.Supervise()
		var err error
		if snap, err = TakeSnapshot(ctx, chaosNS, clients); err != nil {
			return false, nil
		}
		workloads, err := workload.Workloads(ctx)
		if err != nil {
			return false, nil
		}
		exp = Expectations{Pods: workload.Expected(), Workloads: workloads}
		last = Quiescence(snap, exp)
		return len(last) == 0, nil
	})
	if err != nil {
		t.Logf("chaos: not quiescent after %s: %d violations left", cfg.settle, len(last))
	}
	settled := time.Since(faultsEnd)
	violations := checker.Finish(snap, exp)

	counts := workload.Counts()
	transitions, bound, unjudged := checker.Counts()
	var gaps int64
	for _, w := range watches {
		gaps += w.Gaps()
	}
	boundSources, delegates := 0, 0
	for _, src := range snap.Sources {
		if src.NodeName != "" {
			boundSources++
		}
	}
	for _, c := range snap.Candidates {
		if c.NodeName != "" {
			delegates++
		}
	}
	t.Logf("chaos summary: seed=%d faults=%s settle=%s total=%s | pods created=%d (unfit %d) deleted=%d recreated=%d statefulset-deleted=%d scaled=%d call-failures=%d | faults %s | observed transitions=%d bound=%d unjudged=%d watch-gaps=%d | at the end source-pods=%d bound=%d candidates=%d delegates=%d | violations %s",
		cfg.seed, faultsEnd.Sub(faultsStart).Round(time.Second), settled.Round(time.Second), time.Since(start).Round(time.Second),
		counts["created"], counts["created-unfit"], counts["deleted"], counts["recreated"], counts["deleted-statefulset-pod"], counts["scaled"],
		counts["create-failed"]+counts["create-refused"]+counts["delete-failed"]+counts["scale-failed"]+counts["recreate-failed"],
		FormatCounts(FaultKinds, injector.Counts()), transitions, bound, unjudged, gaps,
		len(snap.Sources), boundSources, len(snap.Candidates), delegates, FormatCounts(Kinds, CountByKind(violations)))
	for _, err := range injector.Errors() {
		t.Errorf("the harness could not inject or heal a fault: %v", err)
	}
	if bound == 0 {
		t.Errorf("no candidate was ever seen bound: the run placed nothing")
	}
	return result{violations: violations}
}

// startAgents installs Flotilla's release in every cluster with two agent
// replicas behind one webhook address, and makes every cluster a target of
// each: itself as self, the hole target through the forwarder, the others
// directly.
func startAgents(t *testing.T, s *sandbox.Sandbox, hole *sandbox.Forwarder) map[string][]*sandbox.Agent {
	ctx := t.Context()
	agents := map[string][]*sandbox.Agent{}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, c := range s.Clusters {
		wg.Go(func() {
			replicas, err := startReplicas(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("cluster %s: %w", c.Name, err))
				return
			}
			agents[c.Name] = replicas
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, c := range s.Clusters {
		for _, target := range s.Clusters {
			var err error
			if target.Name == holeTarget && target != c {
				err = addTargetThrough(ctx, c, target, hole.Addr())
			} else {
				err = c.AddTarget(ctx, target)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range s.Clusters {
		for _, target := range s.Clusters {
			if err := c.WaitTargetReady(ctx, target.Name, 90*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	return agents
}

// startReplicas installs the release in c and runs two agent replicas; the
// API server reaches the webhook of either through a forwarder, as a
// Service would.
func startReplicas(ctx context.Context, c *sandbox.Cluster) ([]*sandbox.Agent, error) {
	ports, err := sandbox.FreePorts(1)
	if err != nil {
		return nil, err
	}
	first := fmt.Sprintf("127.0.0.1:%d", ports[0])
	webhook, err := sandbox.NewForwarder(first)
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(webhook.Addr(), ":")
	r, err := c.InstallRelease(ctx, sandbox.ReleaseOptions{
		Set: []string{
			"webhook.url=https://localhost:" + port + "/mutate-pods",
			"agent.leaderElection.leaseDuration=" + leaseDuration.String(),
			"agent.leaderElection.renewDeadline=4s",
			"agent.leaderElection.retryPeriod=1s",
		},
		AgentArgs: []string{fmt.Sprintf("--webhook-port=%d", ports[0])},
	})
	if err != nil {
		return nil, err
	}
	b, err := r.StartAgentReplica(ctx, "agent-b")
	if err != nil {
		return nil, err
	}
	webhook.SetBackends(r.Agent.WebhookAddr(), b.WebhookAddr())
	return []*sandbox.Agent{r.Agent, b}, nil
}

// addTargetThrough makes t a ClusterTarget of c whose kubeconfig names addr
// instead of t's API server.
func addTargetThrough(ctx context.Context, c, t *sandbox.Cluster, addr string) error {
	data, err := os.ReadFile(t.Kubeconfig)
	if err != nil {
		return err
	}
	data = bytes.ReplaceAll(data, []byte(t.Host), []byte("https://"+addr))
	cl := c.CRClient()
	secret := sandbox.KubeconfigSecret("flotilla-target-"+t.Name, data)
	if err := cl.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the kubeconfig Secret of %s in %s: %w", t.Name, c.Name, err)
	}
	ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: t.Name}}
	ct.Spec.KubeconfigSecretRef = &v1alpha1.SecretKeyRef{LocalSecretKeyRef: v1alpha1.LocalSecretKeyRef{Name: secret.Name}}
	if err := cl.Create(ctx, ct); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterTarget %s in %s: %w", t.Name, c.Name, err)
	}
	return nil
}

// TestPlantedBugBuilds keeps the planted bug compiling: no ordinary build
// holds its file, so a change in pkg/reservation could break it unseen.
func TestPlantedBugBuilds(t *testing.T) {
	root, err := sandbox.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The scenario test plants flotilla_planted_unjudged.
	for _, tag := range []string{"flotilla_planted_bug", "flotilla_planted_unjudged"} {
		vet := exec.Command("go", "vet", "-tags", tag, "./pkg/reservation")
		vet.Dir = root
		if out, err := vet.CombinedOutput(); err != nil {
			t.Fatalf("pkg/reservation with -tags %s: %v\n%s", tag, err, out)
		}
	}
}
