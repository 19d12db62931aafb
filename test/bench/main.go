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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

type config struct {
	Targets int     `json:"targets"`
	Nodes   int     `json:"nodesPerTarget"`
	Pods    int     `json:"pods"`
	Rate    float64 `json:"rate"`
	CPU     string  `json:"cpuPerPod"`
	// MaxCandidates is the agent's --max-candidates (0: every target).
	MaxCandidates int `json:"maxCandidates"`
	Timeout       time.Duration
	AgentMemLimit string `json:"agentGOMEMLIMIT,omitempty"`
	Profile       bool   `json:"-"`
	// Invite: every target runs an agent and invites the source through a
	// ClusterSource; the source reaches it with the invited identity only.
	Invite bool   `json:"invite"`
	Out    string `json:"-"`
}

func main() {
	var cfg config
	out := flag.String("out", "bench-results", "Folder for the JSON results.")
	flag.IntVar(&cfg.Targets, "targets", 3, "Target clusters (K).")
	flag.IntVar(&cfg.Nodes, "nodes", 4, "kwok nodes per target (M).")
	flag.IntVar(&cfg.Pods, "pods", 200, "Pods to create (P).")
	flag.Float64Var(&cfg.Rate, "rate", 0, "Pods created per second; 0 creates them all at once (a burst).")
	flag.StringVar(&cfg.CPU, "cpu", "100m", "CPU request of each pod.")
	flag.IntVar(&cfg.MaxCandidates, "max-candidates", 0, "The agent's --max-candidates: targets that get a candidate of each pod at first (0: all).")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "Give up on a run after this long.")
	keep := flag.Bool("keep", false, "Keep the sandbox folder (logs) after the run.")
	hold := flag.Bool("hold", false, "Keep the clusters up after the run until interrupted, to look around.")
	flag.StringVar(&cfg.AgentMemLimit, "agent-gomemlimit", "", "GOMEMLIMIT of the agent (e.g. 120MiB), as a chart sets it from the container's memory limit; empty: none.")
	flag.BoolVar(&cfg.Invite, "invite", true, "Every target runs its own agent and invites the source (ClusterSource, least-privilege identity, ClusterSummary), as in production; false: the source uses admin kubeconfigs and targets run no agent.")
	flag.BoolVar(&cfg.Profile, "profile", false, "Serve the agent's pprof and save its heap and a CPU profile of the Flotilla run into -out.")
	flag.Parse()
	if cfg.Targets < 1 || cfg.Nodes < 1 || cfg.Pods < 1 {
		fmt.Fprintln(os.Stderr, "bench: -targets, -nodes and -pods must be at least 1")
		os.Exit(2)
	}
	cfg.Out = *out
	report, err := run(cfg, *keep, *hold)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Println(report.Markdown())
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	name := filepath.Join(*out, fmt.Sprintf("k%d-m%d-p%d-r%g-c%d.json", cfg.Targets, cfg.Nodes, cfg.Pods, cfg.Rate, cfg.MaxCandidates))
	raw, _ := json.MarshalIndent(report, "", "  ")
	if err := os.WriteFile(name, raw, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Println("results written to", name)
}

func (c config) profilePath(kind string) string {
	return filepath.Join(c.Out, fmt.Sprintf("k%d-m%d-p%d-r%g-c%d-agent-%s.pprof", c.Targets, c.Nodes, c.Pods, c.Rate, c.MaxCandidates, kind))
}

// savePeakHeap samples the agent's heap every second until ctx is done and
// keeps, in path, the heap profile taken when the heap in use was largest:
// the profile after the run shows what stays, this one what a burst adds.
func savePeakHeap(ctx context.Context, addr, path string) error {
	var peak uint64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		inuse, err := memStat(ctx, addr, "HeapInuse")
		if err != nil || inuse <= peak {
			continue // the run ending closes the agent's connections too
		}
		peak = inuse
		if err := saveProfile(ctx, addr, "heap", path); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// memStat reads one of the runtime statistics (runtime.MemStats) printed at
// the end of the agent's text heap profile.
func memStat(ctx context.Context, addr, stat string) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?debug=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "# "+stat+" = "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in the heap profile of %s", stat, addr)
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
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout+10*time.Minute)
	defer cancel()
	opts := sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "src", Nodes: []sandbox.NodeSpec{{}}}}}
	// The baseline is plain kube-scheduler in one cluster: no Flotilla.
	base := sandbox.ClusterSpec{Name: "base", WithoutRelease: true}
	for k := 1; k <= cfg.Targets; k++ {
		spec := sandbox.ClusterSpec{Name: fmt.Sprintf("t%d", k)}
		for m := range cfg.Nodes {
			// Room for every pod on every cluster's nodes, so that neither run
			// is limited by capacity: 1000 pods and 64 CPUs a node.
			n := sandbox.NodeSpec{Name: fmt.Sprintf("t%d-n%d", k, m), CPU: "64", Pods: 1000, Labels: map[string]string{"topology.kubernetes.io/region": spec.Name}}
			spec.Nodes = append(spec.Nodes, n)
			base.Nodes = append(base.Nodes, n)
		}
		opts.Clusters = append(opts.Clusters, spec)
	}
	opts.Clusters = append(opts.Clusters, base)
	dir, err := os.MkdirTemp("", "flotilla-bench-")
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	fmt.Fprintf(os.Stderr, "bench: starting %d clusters in %s\n", len(opts.Clusters), dir)
	s, err := sandbox.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		_ = s.Stop()
		if !keep {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintln(os.Stderr, "bench: sandbox kept in", dir)
		}
	}()
	src := s.Cluster("src")
	var targets []*sandbox.Cluster
	for k := 1; k <= cfg.Targets; k++ {
		targets = append(targets, s.Cluster(fmt.Sprintf("t%d", k)))
	}
	for _, c := range s.Clusters {
		if err := createNamespace(ctx, c); err != nil {
			return nil, err
		}
	}
	agentArgs := []string{fmt.Sprintf("--max-candidates=%d", cfg.MaxCandidates)}
	var pprofAddr string
	if cfg.Profile {
		ports, err := sandbox.FreePorts(1)
		if err != nil {
			return nil, err
		}
		pprofAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
		agentArgs = append(agentArgs, "--pprof-bind-address="+pprofAddr)
	}
	var agentEnv []string
	if cfg.AgentMemLimit != "" {
		agentEnv = append(agentEnv, "GOMEMLIMIT="+cfg.AgentMemLimit)
	}
	var agent *sandbox.Agent
	var targetAgents []*sandbox.Agent
	if cfg.Invite {
		for _, t := range targets {
			a, err := sandbox.StartAgent(ctx, t, nil)
			if err != nil {
				return nil, err
			}
			targetAgents = append(targetAgents, a)
		}
		if agent, err = sandbox.StartAgentEnv(ctx, src, nil, agentEnv, agentArgs...); err != nil {
			return nil, err
		}
		for _, t := range targets {
			if err := src.Invite(ctx, t, namespace); err != nil {
				return nil, err
			}
		}
		for _, t := range targets {
			if err := src.WaitTargetReady(ctx, t.Name, 60*time.Second); err != nil {
				return nil, err
			}
		}
	} else if agent, err = sandbox.StartAgentEnv(ctx, src, targets, agentEnv, agentArgs...); err != nil {
		return nil, err
	}
	report := &Report{Config: cfg, Date: time.Now().UTC().Format(time.RFC3339)}

	fmt.Fprintln(os.Stderr, "bench: baseline run (plain kube-scheduler, one cluster)")
	baseCluster := s.Cluster("base")
	report.Baseline, err = measure(ctx, cfg, s.Clusters, baseCluster, nil, false, []process{{"scheduler", baseCluster.PIDs()[sandbox.Scheduler]}})
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	fmt.Fprintln(os.Stderr, "bench: flotilla run")
	procs := []process{{"agent", agent.PID()}}
	for _, t := range targets {
		procs = append(procs, process{t.Name + " scheduler", t.PIDs()[sandbox.CandidateScheduler]})
	}
	for i, a := range targetAgents {
		procs = append(procs, process{targets[i].Name + " agent", a.PID()})
	}
	var profiled, peaked chan error
	stopPeak := func() {}
	if cfg.Profile {
		profiled = make(chan error, 1)
		go func() { profiled <- saveProfile(ctx, pprofAddr, "profile?seconds=20", cfg.profilePath("cpu")) }()
		peakCtx, cancel := context.WithCancel(ctx)
		stopPeak = cancel
		peaked = make(chan error, 1)
		go func() { peaked <- savePeakHeap(peakCtx, pprofAddr, cfg.profilePath("heap-peak")) }()
	}
	report.Flotilla, err = measure(ctx, cfg, s.Clusters, src, targets, true, procs)
	stopPeak()
	if err != nil {
		return nil, fmt.Errorf("flotilla: %w", err)
	}
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
		report.Flotilla.AgentLiveHeapMiB = float64(live) / (1 << 20)
		if err := <-profiled; err != nil {
			return nil, err
		}
		if err := <-peaked; err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "bench: agent profiles written to %s, %s and %s\n", cfg.profilePath("cpu"), cfg.profilePath("heap"), cfg.profilePath("heap-peak"))
	}
	if hold {
		fmt.Println(report.Markdown())
		fmt.Fprintf(os.Stderr, "bench: clusters up in %s; interrupt to stop\n", dir)
		sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		<-sig.Done()
	}
	return report, nil
}
