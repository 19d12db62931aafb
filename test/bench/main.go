// Command bench measures how fast Flotilla places a burst of pods, what it
// costs the clusters, and how that compares with plain kube-scheduler placing
// the same pods in one cluster with the same nodes, in the same run.
//
//	go run ./test/bench -targets 3 -nodes 4 -pods 200 [-rate 50] [-out bench-results]
//
// It starts a sandbox: a source cluster "src", K target clusters t1..tK with
// M kwok nodes each, and a baseline cluster "base" holding all K×M nodes.
// Results are printed as Markdown and written as JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

type config struct {
	Targets int     `json:"targets"`
	Nodes   int     `json:"nodesPerTarget"`
	Pods    int     `json:"pods"`
	Rate    float64 `json:"rate"`
	CPU     string  `json:"cpuPerPod"`
	// MaxCandidates is the agent's placement.maxCandidates (0: every target).
	MaxCandidates int `json:"maxCandidates"`
	Timeout       time.Duration
	AgentMemLimit string `json:"agentGOMEMLIMIT,omitempty"`
	// AgentSet are extra chart values of the source's release (-agent-set).
	AgentSet []string `json:"agentSet,omitempty"`
	Profile  bool     `json:"-"`
	// ProfileSeconds is how long the agent's CPU profile lasts (-profile).
	ProfileSeconds int `json:"-"`
	// SourceOnly: src's release runs no Flotilla scheduler, as a cluster
	// that only sends its pods elsewhere would run it.
	SourceOnly bool `json:"sourceOnly"`
	// Idle is how long the home cluster is watched with nothing to do
	// before the burst, for its fixed cost (0: not measured).
	Idle time.Duration `json:"idle,omitempty"`
	// Invite: every target runs an agent and invites the source through a
	// ClusterSource; the source reaches it with the invited identity only.
	Invite bool `json:"invite"`
	// Spread places one ReplicaSet of Pods replicas twice with Flotilla,
	// under a region-then-zone spread policy and without a policy, over
	// targets labelled with regions and zones.
	Spread bool `json:"spread"`
	// SpreadWhen is the spread's whenUnsatisfiable.
	SpreadWhen string `json:"spreadWhen,omitempty"`
	// PolicyFirst runs the policy's placement before the one without.
	PolicyFirst bool   `json:"policyFirst,omitempty"`
	Out         string `json:"-"`
	// CPUPerCluster is the CPU quota, in cores, of the cgroup every cluster
	// runs in (every process of it, the agent with its own); 0: uncapped.
	CPUPerCluster float64 `json:"cpuPerCluster"`
	// Shape is what of each cluster its CPU quota holds: shapeAll or
	// shapeControlPlane (budget.go).
	Shape string `json:"shape,omitempty"`
	// CgroupVersion is the cgroup version of the quotas.
	CgroupVersion string `json:"cgroup,omitempty"`
	// Oversubscribed says when the quotas of the clusters of the Flotilla
	// run add up to more than the machine's CPUs.
	Oversubscribed string `json:"oversubscribed,omitempty"`
	// Mesh, when above 0, is the number N of clusters m1..mN of the mesh
	// run (mesh.go): each the source of a burst of Pods pods and a target
	// of the others.
	Mesh int `json:"mesh,omitempty"`
	// MeshSelf: with Mesh, every cluster also targets itself (self: true).
	MeshSelf bool `json:"meshSelf,omitempty"`
	// MeshLocalFirst: with Mesh and MeshSelf, every self target has
	// localFirst: pods that fit at home stay there as ordinary pods.
	MeshLocalFirst bool `json:"meshLocalFirst,omitempty"`
	// MeshPods, with Mesh, are the bursts of m1..mN in order; empty: Pods
	// each.
	MeshPods []int `json:"meshPods,omitempty"`
	// NodePods, with Mesh, is how many pods each kwok node takes (its
	// allocatable pods).
	NodePods int `json:"nodePods,omitempty"`
	// GangCount, with -gangs, is how many gangs of each size a run places.
	GangCount int `json:"gangCount,omitempty"`
	// PermitTimeoutSeconds, with -gangs, is the targets' chart value
	// scheduler.permitTimeoutSeconds; 0: the chart's default.
	PermitTimeoutSeconds int `json:"permitTimeoutSeconds,omitempty"`
	// budget holds the cgroups, with CPUPerCluster.
	budget *budget
}

func main() {
	var cfg config
	out := flag.String("out", "bench-results", "Folder for the JSON results.")
	flag.IntVar(&cfg.Targets, "targets", 3, "Target clusters (K).")
	flag.IntVar(&cfg.Nodes, "nodes", 4, "kwok nodes per target (M).")
	flag.IntVar(&cfg.Pods, "pods", 200, "Pods to create (P).")
	flag.Float64Var(&cfg.Rate, "rate", 0, "Pods created per second; 0 creates them all at once (a burst).")
	flag.StringVar(&cfg.CPU, "cpu", "100m", "CPU request of each pod.")
	flag.IntVar(&cfg.MaxCandidates, "max-candidates", 2, "The agent's placement.maxCandidates (the chart's agent.maxCandidates): targets that get a candidate of each pod at first (0: all; 2 is the agent's default).")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "Give up on a run after this long.")
	keep := flag.Bool("keep", false, "Keep the sandbox folder (logs) after the run.")
	hold := flag.Bool("hold", false, "Keep the clusters up after the run until interrupted, to look around.")
	flag.StringVar(&cfg.AgentMemLimit, "agent-gomemlimit", "", "GOMEMLIMIT of the agent (e.g. 120MiB), as a chart sets it from the container's memory limit; empty: none.")
	flag.Func("agent-set", "A chart value of the source's release (helm --set), e.g. agent.leaderElection.renewDeadline=40s; repeat for more. The bench runs one agent replica, which nothing restarts: on a slow day a source API server of 0.15 cores took longer than the default renewDeadline (10 s) to renew its Lease, and the agent stepped down.", func(v string) error {
		cfg.AgentSet = append(cfg.AgentSet, v)
		return nil
	})
	flag.BoolVar(&cfg.Invite, "invite", true, "Every target runs its own agent and invites the source (ClusterSource, least-privilege identity, ClusterSummary), as in production; false: the source uses admin kubeconfigs and targets run no agent.")
	flag.BoolVar(&cfg.Profile, "profile", false, "Serve the agent's pprof and save its heap and a CPU profile of the Flotilla run, and CPU profiles of the first target's Flotilla scheduler and agent over the same seconds (with -spread: the run under the policy; with -mesh: the first mesh cluster's agent, its CPU only) into -out.")
	flag.BoolVar(&cfg.SourceOnly, "source-only", true, "src's release runs no Flotilla scheduler (the chart's scheduler.enabled=false), as a cluster that only sends its pods elsewhere would; false: it runs one, idle.")
	flag.IntVar(&cfg.ProfileSeconds, "profile-seconds", 20, "With -profile: how long the agent's CPU profile lasts, from the first create (a whole run: its length or more).")
	flag.DurationVar(&cfg.Idle, "idle", 0, "Before each run's first create, measure the home cluster's CPU by process for this long with nothing to do: its fixed cost, in cores (0: not measured).")
	flag.BoolVar(&cfg.Spread, "spread", false, "Label the targets with regions and zones and place one ReplicaSet of -pods replicas with Flotilla twice, under a region-then-zone spread PlacementPolicy and without a policy (the baseline: the same ReplicaSet with topologySpreadConstraints); the JSON goes into <out>/spread.")
	flag.StringVar(&cfg.SpreadWhen, "spread-when", v1alpha1.DoNotSchedule, "With -spread: the spread's whenUnsatisfiable, DoNotSchedule or ScheduleAnyway (the baseline's topologySpreadConstraints too).")
	flag.Float64Var(&cfg.CPUPerCluster, "cpu-per-cluster", 0.45, "CPU quota, in cores, of the cgroup each cluster (every process of it: control plane, kwok, schedulers, agent) runs in, the baseline's too, as if each had its own cores; the load generator is not capped. Needs root and a cgroup cpu controller (v1 or v2). 0: no cgroups, every process shares the machine.")
	flag.BoolVar(&cfg.PolicyFirst, "policy-first", false, "With -spread: place the workload under the policy first, then without (default: without first).")
	flag.IntVar(&cfg.Mesh, "mesh", 0, "Mesh mode (N clusters m1..mN, each the source of its own burst of -pods pods and a target of the others, all bursts at once), against one baseline cluster of N×M nodes placing the N×P pods and the N clusters placing their own pods with kube-scheduler; the JSON goes into <out>/mesh-n<N>-....json. 0: off. -targets is not used.")
	flag.BoolVar(&cfg.MeshLocalFirst, "mesh-local-first", false, "With -mesh and -mesh-self: every self target has localFirst, so a pod that fits in its own cluster when created stays there as an ordinary pod, without candidates.")
	flag.BoolVar(&cfg.MeshSelf, "mesh-self", true, "With -mesh: every cluster also targets itself (a ClusterTarget with self: true), so its pods may stay or go.")
	meshPods := flag.String("mesh-pods", "", "With -mesh: each cluster's burst, m1 first, comma-separated (e.g. 800,400,0), in place of -pods each; with -node-pods, a cluster may be sent more than it holds, and then the clusters-alone run is left out.")
	flag.IntVar(&cfg.NodePods, "node-pods", 1000, "With -mesh: the pods each kwok node takes (its allocatable pods; 64 CPUs each).")
	gangs := flag.String("gangs", "", "Gang mode: the gang sizes, comma-separated (e.g. 4,16,64): for each, -gang-count gangs of 100m members placed all at once through Flotilla (anyClusters, targets that invite the source) and by kube-scheduler's own gang scheduling in the baseline cluster (PodGroups with a gang policy); the JSON goes into <out>/gangs-....json. Empty: off.")
	flag.IntVar(&cfg.GangCount, "gang-count", 8, "With -gangs: gangs of each size per run.")
	flag.IntVar(&cfg.PermitTimeoutSeconds, "permit-timeout", 0, "With -gangs: the targets' scheduler.permitTimeoutSeconds, how long a reservation waits for its source (0: the chart's default, 30).")
	shape := flag.String("shape", "", "With -cpu-per-cluster: what of each cluster its quota holds. all: every process of the cluster (control plane, kwok, the release's agent and scheduler); control-plane: its control plane alone (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), as in production, with kwok and the release's pods in an uncapped group whose CPU is reported apart; both: the burst twice, all then control-plane, in two sandboxes. Empty: both for a burst, all with -gangs (which takes all or control-plane), -mesh or -spread (which take only all).")
	flag.Parse()
	// The sandbox's controller-runtime clients log through klog, to stderr
	// with the bench's own lines.
	ctrl.SetLogger(klog.NewKlogr())
	takes := shapesBurst
	switch {
	case *gangs != "":
		takes = shapesOne
	case cfg.Mesh > 0 || cfg.Spread:
		takes = shapesAllOnly
	}
	shapes, err := parseShape(*shape, takes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	cfg.Shape = shapes[0]
	if *gangs != "" {
		sizes, err := parseSizes(*gangs)
		if err != nil || cfg.GangCount < 1 {
			fmt.Fprintln(os.Stderr, "bench:", err, "(and -gang-count must be at least 1)")
			os.Exit(2)
		}
		cfg.Out = *out
		if err := mainGangs(cfg, sizes, *keep); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if cfg.Targets < 1 || cfg.Nodes < 1 || cfg.Pods < 1 {
		fmt.Fprintln(os.Stderr, "bench: -targets, -nodes and -pods must be at least 1")
		os.Exit(2)
	}
	if cfg.SpreadWhen != v1alpha1.DoNotSchedule && cfg.SpreadWhen != v1alpha1.ScheduleAnyway {
		fmt.Fprintln(os.Stderr, "bench: -spread-when is DoNotSchedule or ScheduleAnyway")
		os.Exit(2)
	}
	if cfg.Spread && cfg.Rate > 0 {
		fmt.Fprintln(os.Stderr, "bench: -spread makes its pods through a ReplicaSet, which has no -rate")
		os.Exit(2)
	}
	if cfg.CPUPerCluster < 0 {
		fmt.Fprintln(os.Stderr, "bench: -cpu-per-cluster is 0 (uncapped) or more")
		os.Exit(2)
	}
	cfg.Out = *out
	if *meshPods != "" {
		for _, f := range strings.Split(*meshPods, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				fmt.Fprintf(os.Stderr, "bench: -mesh-pods %q: want a count of pods (0 or more) per cluster\n", *meshPods)
				os.Exit(2)
			}
			cfg.MeshPods = append(cfg.MeshPods, n)
		}
		if len(cfg.MeshPods) != cfg.Mesh {
			fmt.Fprintf(os.Stderr, "bench: -mesh-pods has %d bursts for -mesh %d clusters\n", len(cfg.MeshPods), cfg.Mesh)
			os.Exit(2)
		}
	}
	if cfg.NodePods < 1 {
		fmt.Fprintln(os.Stderr, "bench: -node-pods must be at least 1")
		os.Exit(2)
	}
	if cfg.Mesh > 0 {
		if cfg.Spread {
			fmt.Fprintln(os.Stderr, "bench: -mesh does not go with -spread")
			os.Exit(2)
		}
		if err := mainMesh(cfg, *keep, *hold); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if cfg.Mesh < 0 {
		fmt.Fprintln(os.Stderr, "bench: -mesh is 0 (off) or the number of clusters")
		os.Exit(2)
	}
	if cfg.CPUPerCluster == 0 {
		shapes = shapes[:1]
	}
	for _, shape := range shapes {
		cfg.Shape = shape
		if len(shapes) > 1 {
			fmt.Fprintf(os.Stderr, "bench: budget shape %s\n", shape)
		}
		if err := burst(cfg, *out, *keep, *hold); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
}

// What shapes of the budget a mode of the bench takes (parseShape).
const (
	// shapesBurst: either or both, both by default.
	shapesBurst = iota
	// shapesOne: all (the default) or control-plane, one per run (-gangs).
	shapesOne
	// shapesAllOnly: all alone (-mesh, -spread).
	shapesAllOnly
)

// parseShape reads -shape: the shapes of the budget to run, in order, for
// a mode that takes what takes says (shapesBurst, shapesOne,
// shapesAllOnly).
func parseShape(raw string, takes int) ([]string, error) {
	switch {
	case raw == "" && takes != shapesBurst, raw == shapeAll:
		return []string{shapeAll}, nil
	case takes == shapesAllOnly:
		return nil, fmt.Errorf("-shape %s: -mesh and -spread run only with -shape %s", raw, shapeAll)
	case raw == shapeControlPlane:
		return []string{shapeControlPlane}, nil
	case takes == shapesOne && raw == "both":
		return nil, fmt.Errorf("-shape %s: -gangs runs one shape at a time, %s or %s", raw, shapeAll, shapeControlPlane)
	case raw == "" || raw == "both":
		return []string{shapeAll, shapeControlPlane}, nil
	}
	return nil, fmt.Errorf("-shape %q: want %s, %s or both", raw, shapeAll, shapeControlPlane)
}

// burst runs the burst bench once, in cfg's shape, prints its report and
// writes its JSON into out.
func burst(cfg config, out string, keep, hold bool) error {
	report, err := run(cfg, keep, hold)
	if err != nil {
		return err
	}
	fmt.Println(report.Markdown())
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	capped := ""
	if cfg.CPUPerCluster > 0 {
		// Aside from the uncapped runs of the sweep, which the plot reads.
		capped = fmt.Sprintf("-cpu%g", cfg.CPUPerCluster)
		if cfg.Shape == shapeControlPlane {
			capped += "-cp"
		}
	}
	name := filepath.Join(out, fmt.Sprintf("k%d-m%d-p%d-r%g-c%d%s.json", cfg.Targets, cfg.Nodes, cfg.Pods, cfg.Rate, cfg.MaxCandidates, capped))
	if cfg.Spread {
		// Aside from the grid's files, which the plot reads all of.
		name = filepath.Join(out, "spread", fmt.Sprintf("k%d-m%d-p%d-c%d%s-%s.json", cfg.Targets, cfg.Nodes, cfg.Pods, cfg.MaxCandidates, capped, time.Now().UTC().Format("20060102T150405")))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
	}
	raw, _ := json.MarshalIndent(report, "", "  ")
	if err := os.WriteFile(name, raw, 0o644); err != nil {
		return err
	}
	fmt.Println("results written to", name)
	return nil
}

func (c config) profilePath(kind string) string {
	dir := c.Out
	if c.Spread {
		dir = filepath.Join(dir, "spread") // beside its JSON, not over the grid's profiles
	}
	return filepath.Join(dir, fmt.Sprintf("k%d-m%d-p%d-r%g-c%d-agent-%s.pprof", c.Targets, c.Nodes, c.Pods, c.Rate, c.MaxCandidates, kind))
}

// savePeakHeap reads the agent's heap in use every second from its metrics
// at metricsAddr until ctx is done, and keeps in path the heap profile
// (from addr) taken when it was largest, give or take 5 %: the profile
// after the run shows what stays, this one what a burst adds. The metric
// is cheap to serve; a heap profile costs the agent CPU to write, so one
// is taken only when the heap has grown.
func savePeakHeap(ctx context.Context, addr, metricsAddr, path string) error {
	var peak uint64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		inuse, err := heapInuse(ctx, metricsAddr)
		if err != nil || inuse <= peak+peak/20 {
			continue // the run ending closes the agent's connections too
		}
		peak = inuse
		if err := saveProfile(ctx, addr, "heap", path); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// heapInuse reads go_memstats_heap_inuse_bytes from the Prometheus metrics
// at addr.
func heapInuse(ctx context.Context, addr string) (uint64, error) {
	v, err := valueAfter(ctx, "http://"+addr+"/metrics", "go_memstats_heap_inuse_bytes ")
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(v, 64)
	return uint64(f), err
}

// memStat reads one of the runtime statistics (runtime.MemStats) printed at
// the end of the agent's text heap profile.
func memStat(ctx context.Context, addr, stat string) (uint64, error) {
	v, err := valueAfter(ctx, "http://"+addr+"/debug/pprof/heap?debug=1", "# "+stat+" = ")
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(v, 10, 64)
}

// valueAfter fetches url and returns the rest of its first line that
// starts with prefix.
func valueAfter(ctx context.Context, url, prefix string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	// Read once a second during a profiled run: asked for gzip (Go's
	// client asks by default), the agent compressed its whole metrics page
	// each time, 1.8 % of its CPU in the 5,000-pod run.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no %q in %s", strings.TrimSpace(prefix), url)
}

// saveProfile fetches /debug/pprof/<what> from addr into path.
func saveProfile(ctx context.Context, addr, what, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetching agent profile %s: %w", what, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching agent profile %s: %s", what, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// Written aside and renamed: an interrupted fetch leaves the last
	// complete profile in place.
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func run(cfg config, keep, hold bool) (*Report, error) {
	runs := 1 // how many -timeout the whole bench may take, beside the sandbox's start
	if cfg.Spread {
		runs = 4 // the baseline, two Flotilla runs, the clean-up between
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(runs)*cfg.Timeout+10*time.Minute)
	defer cancel()
	opts := sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "src", Nodes: []sandbox.NodeSpec{{}}, SourceOnly: cfg.SourceOnly}}}
	// The baseline is plain kube-scheduler in one cluster: no Flotilla.
	base := sandbox.ClusterSpec{Name: "base", WithoutRelease: true}
	var where map[string]place
	if cfg.Spread {
		where = topology(cfg.Targets)
	}
	for k := 1; k <= cfg.Targets; k++ {
		spec := sandbox.ClusterSpec{Name: fmt.Sprintf("t%d", k)}
		labels := map[string]string{regionKey: spec.Name}
		if p, ok := where[spec.Name]; ok {
			labels = map[string]string{regionKey: p.Region, zoneKey: p.Zone}
		}
		for m := range cfg.Nodes {
			// Room for every pod on every cluster's nodes, so that neither run
			// is limited by capacity: 1000 pods and 64 CPUs a node.
			n := sandbox.NodeSpec{Name: fmt.Sprintf("t%d-n%d", k, m), CPU: "64", Pods: 1000, Labels: labels}
			spec.Nodes = append(spec.Nodes, n)
			base.Nodes = append(base.Nodes, n)
		}
		opts.Clusters = append(opts.Clusters, spec)
	}
	opts.Clusters = append(opts.Clusters, base)
	s, stop, err := startSandbox(ctx, &cfg, opts, "flotilla-bench-", keep)
	if err != nil {
		return nil, err
	}
	defer stop()
	src := s.Cluster("src")
	sourceAPIServer, baseAPIServer = src.RESTConfig(), s.Cluster("base").RESTConfig()
	var targets []*sandbox.Cluster
	for k := 1; k <= cfg.Targets; k++ {
		targets = append(targets, s.Cluster(fmt.Sprintf("t%d", k)))
	}
	for _, c := range s.Clusters {
		if err := createNamespace(ctx, c); err != nil {
			return nil, err
		}
	}
	agentRelease, pprofAddr, err := sourceAgentRelease(cfg)
	if err != nil {
		return nil, err
	}
	var agent *sandbox.Agent
	var targetAgents []*sandbox.Agent
	var firstTarget profiledTarget
	if cfg.Profile {
		firstTarget = profiledTarget{name: targets[0].Name, scheduler: targets[0].CandidateSchedulerConfig()}
	}
	if cfg.Invite {
		for k, t := range targets {
			var release sandbox.ReleaseOptions
			if k == 0 {
				if release, firstTarget.agentPprof, err = targetAgentRelease(cfg); err != nil {
					return nil, err
				}
			}
			a, err := sandbox.StartAgentWith(ctx, t, nil, release)
			if err != nil {
				return nil, err
			}
			targetAgents = append(targetAgents, a)
		}
		if agent, err = sandbox.StartAgentWith(ctx, src, nil, agentRelease); err != nil {
			return nil, err
		}
		if err := invite(ctx, src, targets); err != nil {
			return nil, err
		}
	} else if agent, err = sandbox.StartAgentWith(ctx, src, targets, agentRelease); err != nil {
		return nil, err
	}
	if cfg.Spread {
		if err := labelTargets(ctx, src, where); err != nil {
			return nil, err
		}
	}
	report := &Report{Config: cfg, Date: time.Now().UTC().Format(time.RFC3339)}

	fmt.Fprintln(os.Stderr, "bench: baseline run (plain kube-scheduler, one cluster)")
	baseCluster := s.Cluster("base")
	baseShape := podShape{}
	if cfg.Spread {
		baseShape = podShape{replicaSet: spreadWorkload, topologySpread: true}
	}
	baseIdle, err := idleCores(ctx, cfg, baseCluster, "", "")
	if err != nil {
		return nil, err
	}
	baseProfiled := startBaseAPIServerProfile(ctx, cfg)
	report.Baseline, err = measure(ctx, cfg, s.Clusters, baseCluster, nil, baseShape, []process{{"scheduler", baseCluster.PIDs()[sandbox.Scheduler]}})
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	if err := baseProfiled(); err != nil {
		return nil, err
	}
	report.Baseline.IdleCores = baseIdle
	procs := []process{{"agent", agent.PID()}}
	for _, t := range targets {
		procs = append(procs, process{t.Name + " scheduler", t.PIDs()[sandbox.CandidateScheduler]})
	}
	for i, a := range targetAgents {
		procs = append(procs, process{targets[i].Name + " agent", a.PID()})
	}
	if !cfg.Spread {
		idleProfile := ""
		if cfg.Profile {
			idleProfile = cfg.profilePath("idle-cpu")
		}
		srcIdle, err := idleCores(ctx, cfg, src, pprofAddr, idleProfile)
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(os.Stderr, "bench: flotilla run")
		report.Flotilla, err = profiledRun(ctx, cfg, firstTarget, pprofAddr, agent.MetricsAddr, func() (*Run, error) {
			return withRounds(ctx, agent.MetricsAddr, func() (*Run, error) {
				return measure(ctx, cfg, s.Clusters, src, targets, podShape{optIn: true}, procs)
			})
		})
		if err != nil {
			return nil, fmt.Errorf("flotilla: %w", err)
		}
		report.Flotilla.IdleCores = srcIdle
		return report, holdOn(ctx, report, s.Dir, hold)
	}
	// The same ReplicaSet twice, under the policy and without, one after
	// the other: the first is removed everywhere before the second starts.
	report.Spread = &Spread{PolicyFirst: cfg.PolicyFirst, Places: where}
	withPolicy := func() error {
		fmt.Fprintln(os.Stderr, "bench: flotilla run under the spread policy")
		if err := createSpreadPolicy(ctx, cfg, src); err != nil {
			return err
		}
		r, err := profiledRun(ctx, cfg, firstTarget, pprofAddr, agent.MetricsAddr, func() (*Run, error) {
			return withRounds(ctx, agent.MetricsAddr, func() (*Run, error) {
				return measure(ctx, cfg, s.Clusters, src, targets, podShape{optIn: true, replicaSet: spreadWorkload}, procs)
			})
		})
		if err != nil {
			return fmt.Errorf("flotilla, spread policy: %w", err)
		}
		report.Flotilla = r
		return nil
	}
	withoutPolicy := func() error {
		fmt.Fprintln(os.Stderr, "bench: flotilla run without a policy")
		r, err := measure(ctx, cfg, s.Clusters, src, targets, podShape{optIn: true, replicaSet: noPolicyWorkload}, procs)
		if err != nil {
			return fmt.Errorf("flotilla, no policy: %w", err)
		}
		report.Spread.NoPolicy = r
		return nil
	}
	first, second, firstWorkload := withoutPolicy, withPolicy, noPolicyWorkload
	if cfg.PolicyFirst {
		first, second, firstWorkload = withPolicy, withoutPolicy, spreadWorkload
	}
	if err := first(); err != nil {
		return nil, err
	}
	if err := removeWorkload(ctx, cfg, src, targets, firstWorkload); err != nil {
		return nil, err
	}
	if cfg.PolicyFirst {
		// "Without a policy" means none in the namespace, not one that
		// selects other pods.
		if err := src.CRClient().Delete(ctx, &v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: spreadPolicy, Namespace: namespace}}); err != nil {
			return nil, fmt.Errorf("deleting PlacementPolicy %s: %w", spreadPolicy, err)
		}
	}
	if err := second(); err != nil {
		return nil, err
	}
	return report, holdOn(ctx, report, s.Dir, hold)
}

// sourceAgentRelease is the release of a source cluster's agent, from cfg:
// its chart values, flags and environment, and the address of its pprof
// server with -profile.
func sourceAgentRelease(cfg config) (opts sandbox.ReleaseOptions, pprofAddr string, err error) {
	opts.Set = []string{fmt.Sprintf("agent.maxCandidates=%d", cfg.MaxCandidates)}
	if pprofAddr, err = servePprof(cfg, &opts); err != nil {
		return opts, "", err
	}
	if cfg.AgentMemLimit != "" {
		opts.AgentEnv = append(opts.AgentEnv, "GOMEMLIMIT="+cfg.AgentMemLimit)
	}
	opts.Set = append(opts.Set, cfg.AgentSet...)
	return opts, pprofAddr, nil
}

// invite has each of targets, whose agents run, invite src (a
// ClusterSource, the bench namespace) and src reach each one with a
// ClusterTarget naming the invited identity's kubeconfig, as an operator
// would, and waits until src reports every one Ready.
func invite(ctx context.Context, src *sandbox.Cluster, targets []*sandbox.Cluster) error {
	for _, t := range targets {
		if err := src.Invite(ctx, t, namespace); err != nil {
			return err
		}
	}
	for _, t := range targets {
		if err := src.WaitTargetReady(ctx, t.Name, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// profiledRun runs one Flotilla measurement; with -profile, it takes the
// agent's CPU profile of its first -profile-seconds, its heap at its peak and after
// it, and its live heap after the run, and the CPU profiles of first's
// scheduler and agent over the same seconds.
func profiledRun(ctx context.Context, cfg config, first profiledTarget, pprofAddr, metricsAddr string, measureRun func() (*Run, error)) (*Run, error) {
	var profiled, peaked chan error
	stopPeak := func() {}
	targetProfiled := first.start(ctx, cfg.ProfileSeconds, cfg.profilePath("cpu"))
	if cfg.Profile {
		profiled = make(chan error, 1)
		go func() {
			profiled <- saveProfile(ctx, pprofAddr, fmt.Sprintf("profile?seconds=%d", cfg.ProfileSeconds), cfg.profilePath("cpu"))
		}()
		peakCtx, cancel := context.WithCancel(ctx)
		stopPeak = cancel
		peaked = make(chan error, 1)
		go func() { peaked <- savePeakHeap(peakCtx, pprofAddr, metricsAddr, cfg.profilePath("heap-peak")) }()
	}
	apiProfiled := startAPIServerProfile(ctx, cfg)
	run, err := measureRun()
	stopPeak()
	if err != nil {
		return nil, err
	}
	if err := apiProfiled(); err != nil {
		return nil, err
	}
	watchFanOut(ctx, cfg.Pods)
	if cfg.Profile {
		if err := saveProfile(ctx, pprofAddr, "heap?gc=1", cfg.profilePath("heap")); err != nil {
			return nil, err
		}
		// Right after the collection the profile forced: the live heap,
		// exact where the profile's figures are sampled.
		live, err := memStat(ctx, pprofAddr, "HeapAlloc")
		if err != nil {
			return nil, err
		}
		run.AgentLiveHeapMiB = float64(live) / (1 << 20)
		if err := <-profiled; err != nil {
			return nil, err
		}
		if err := <-peaked; err != nil {
			return nil, err
		}
		if err := targetProfiled(); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "bench: agent profiles written to %s, %s and %s\n", cfg.profilePath("cpu"), cfg.profilePath("heap"), cfg.profilePath("heap-peak"))
	}
	return run, nil
}

// holdOn keeps the clusters up after the run, with -hold, until interrupted.
func holdOn(ctx context.Context, report *Report, dir string, hold bool) error {
	if hold {
		fmt.Println(report.Markdown())
		fmt.Fprintf(os.Stderr, "bench: clusters up in %s; interrupt to stop\n", dir)
		sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		<-sig.Done()
	}
	return nil
}

// startSandbox starts the clusters of opts in a new folder, each in its
// CPU budget when cfg asks for one (setting cfg's budget and what the
// report says of it); stop stops them, removes the folder unless keep,
// and then the budget's cgroups.
func startSandbox(ctx context.Context, cfg *config, opts sandbox.Options, prefix string, keep bool) (s *sandbox.Sandbox, stop func(), err error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, nil, err
	}
	opts.Dir = dir
	removeBudget := func() {}
	if cfg.CPUPerCluster > 0 {
		if cfg.budget, err = newBudget(cfg.CPUPerCluster, cfg.Shape, &opts); err != nil {
			_ = os.RemoveAll(dir)
			return nil, nil, err
		}
		removeBudget = cfg.budget.remove
		cfg.CgroupVersion = cfg.budget.h.Version.String()
		if cfg.Oversubscribed = oversubscribed(*cfg, runtime.NumCPU()); cfg.Oversubscribed != "" {
			fmt.Fprintln(os.Stderr, "bench: warning:", cfg.Oversubscribed)
		}
	}
	fmt.Fprintf(os.Stderr, "bench: starting %d clusters in %s\n", len(opts.Clusters), dir)
	if s, err = sandbox.Start(ctx, opts); err != nil {
		removeBudget()
		return nil, nil, err
	}
	return s, func() {
		_ = s.Stop()
		if !keep {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintln(os.Stderr, "bench: sandbox kept in", dir)
		}
		// After the sandbox has stopped: its processes are in the groups.
		removeBudget()
	}, nil
}
