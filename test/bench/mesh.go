package main

// The mesh (-mesh N): N clusters m1..mN, each the source of a burst of P
// pods and a target of the others, all bursts at once, each cluster in the
// same CPU budget. Its aggregate throughput is set against one baseline
// cluster with the same budget and against the same N clusters placing
// their own pods with kube-scheduler, in the same run.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// meshRunLabel tells the pods of the mesh's two runs on the same clusters
// apart: "alone" (kube-scheduler) or "flotilla".
const meshRunLabel = "bench-run"

// MeshReport is one -mesh run: the Flotilla mesh, the same clusters
// alone, and the one baseline cluster, same machine, same sandbox.
type MeshReport struct {
	Config config `json:"config"`
	Date   string `json:"date"`
	// Baseline is the cluster "base", with the N×M nodes of the mesh,
	// placing the mesh's N×P pods with kube-scheduler, one burst.
	Baseline *Run `json:"baseline"`
	// Alone is the N clusters each placing its own P pods with its own
	// kube-scheduler (pods not opted in), all bursts at once.
	Alone *MeshRun `json:"alone"`
	// AloneLeftOut says why the clusters-alone run was not made (a
	// cluster's burst is more than its nodes hold); empty when it was.
	AloneLeftOut string `json:"aloneLeftOut,omitempty"`
	// Flotilla is the N clusters each placing its own P pods, opted in,
	// through Flotilla, all bursts at once.
	Flotilla *MeshRun     `json:"flotilla"`
	Ratios   MeshHeadline `json:"ratios"`
}

// MeshRun is what one run of the N clusters measured.
type MeshRun struct {
	// Pods is N×P.
	Pods int `json:"pods"`
	// Seconds is from the first create call to the last pod Running.
	Seconds float64 `json:"seconds"`
	// PodsPerSecondBound (Running) is the aggregate throughput: the pods
	// bound (Running), N×P unless some were lost, ÷ the time from the
	// first create call, in any cluster, to the last pod bound (Running),
	// in any cluster.
	PodsPerSecondBound   float64     `json:"podsPerSecondBound"`
	PodsPerSecondRunning float64     `json:"podsPerSecondRunning"`
	BoundMillis          Percentiles `json:"boundMillis"`
	RunningMillis        Percentiles `json:"runningMillis"`
	// Lost counts the pods deleted before they were seen Running (evicted:
	// see the clusters' Events); the throughput to Running counts the pods
	// that ran, to bound those that were bound.
	Lost int `json:"lost"`
	// CreateRetries counts the pod creates the API servers failed and the
	// bench retried (a webhook call that timed out in a saturated cluster).
	CreateRetries int64 `json:"createRetries,omitempty"`
	// Clusters are the figures of each cluster's own burst.
	Clusters map[string]*MeshCluster `json:"clusters"`
	// MachineCPUSeconds and CPUByCluster: as in Run, from /proc.
	MachineCPUSeconds float64            `json:"machineCPUSeconds"`
	CPUByCluster      map[string]float64 `json:"cpuByCluster"`
	Processes         []ProcessCost      `json:"processes"`
	// Budget is, with -cpu-per-cluster, what each cluster used of its
	// quota; its CPU per pod counts the P pods of its own burst.
	Budget map[string]ClusterBudget `json:"cpuBudget,omitempty"`
}

// MeshCluster is one cluster's burst in a mesh run.
type MeshCluster struct {
	Pods int `json:"pods"`
	// PodsPerSecondBound (Running): P ÷ the time from the run's first
	// create call to this cluster's last pod bound (Running).
	PodsPerSecondBound   float64     `json:"podsPerSecondBound"`
	PodsPerSecondRunning float64     `json:"podsPerSecondRunning"`
	BoundMillis          Percentiles `json:"boundMillis"`
	RunningMillis        Percentiles `json:"runningMillis"`
	// Requests are all the requests its API server served during the run
	// (its own pods and, with Flotilla, the other clusters' candidates)
	// ÷ P.
	Requests Requests `json:"requestsPerPod"`
	// PodsByNode counts its pods by node: with Flotilla the virtual node
	// flotilla-<target> of the cluster that runs each; pods deleted
	// during the run are not in it.
	PodsByNode map[string]int `json:"podsByNode"`
	// Deleted counts its pods deleted during the run (by no one of the
	// bench: evicted, e.g. from a virtual node tainted NotReady). A pod
	// counts as bound and Running when it was seen so once.
	Deleted int `json:"deletedDuringRun"`
	// Lost counts those deleted before they were seen Running: they never
	// ran (bare pods, nothing makes them again).
	Lost int `json:"lost"`
	// EventsByReason counts the Events of its pods by reason, each Event
	// as many times as it occurred.
	EventsByReason map[string]int `json:"eventsByReason"`
}

// MeshHeadline are the mesh's aggregate throughputs as ratios.
type MeshHeadline struct {
	// VsBaseline*: Flotilla's aggregate pods/s ÷ the one baseline
	// cluster's pods/s.
	VsBaselineBound   float64 `json:"vsBaselineBound"`
	VsBaselineRunning float64 `json:"vsBaselineRunning"`
	// VsAlone*: Flotilla's aggregate pods/s ÷ the aggregate pods/s of the
	// same clusters each placing its own pods.
	VsAloneBound   float64 `json:"vsAloneBound"`
	VsAloneRunning float64 `json:"vsAloneRunning"`
	// CPUBound is what the budgets allow the mesh against the baseline
	// if CPU alone bounds both: N quotas ÷ the mesh's CPU per pod (every
	// cluster's cgroup CPU ÷ N×P), against one quota ÷ the baseline's CPU
	// per pod; that is N × the baseline's CPU per pod ÷ the mesh's. 0
	// without budgets.
	CPUBound float64 `json:"cpuBound,omitempty"`
	// AloneVsBaseline*: the clusters alone ÷ the one baseline cluster.
	AloneVsBaselineBound   float64 `json:"aloneVsBaselineBound"`
	AloneVsBaselineRunning float64 `json:"aloneVsBaselineRunning"`
}

// burst is the number of pods cluster m<k+1> creates.
func (c config) burst(k int) int {
	if k < len(c.MeshPods) {
		return c.MeshPods[k]
	}
	return c.Pods
}

// meshPods is the number of pods of all the mesh's bursts.
func (c config) meshPods() int {
	n := 0
	for k := range c.Mesh {
		n += c.burst(k)
	}
	return n
}

// perCluster is the mesh's pods ÷ N: what a cluster's requests and CPU
// are counted per (P when every cluster bursts P).
func (c config) perCluster() float64 {
	return float64(c.meshPods()) / float64(c.Mesh)
}

// aloneLeftOut says why the clusters cannot each place their own burst
// with their own nodes: a burst is more than its cluster's nodes take.
func (c config) aloneLeftOut() string {
	for k := range c.Mesh {
		if room := c.Nodes * c.NodePods; c.burst(k) > room {
			return fmt.Sprintf("m%d's burst of %d pods is more than its %d nodes take (%d)", k+1, c.burst(k), c.Nodes, room)
		}
	}
	return ""
}

// ratio is a ÷ b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// meshHeadline computes the report's ratios.
func meshHeadline(flotilla, alone *MeshRun, base *Run) MeshHeadline {
	var h MeshHeadline
	if flotilla != nil && base != nil {
		h.VsBaselineBound = ratio(flotilla.PodsPerSecondBound, base.PodsPerSecondBound)
		h.VsBaselineRunning = ratio(flotilla.PodsPerSecondRunning, base.PodsPerSecondRunning)
	}
	if flotilla != nil && alone != nil {
		h.VsAloneBound = ratio(flotilla.PodsPerSecondBound, alone.PodsPerSecondBound)
		h.VsAloneRunning = ratio(flotilla.PodsPerSecondRunning, alone.PodsPerSecondRunning)
	}
	if flotilla != nil && base != nil && len(flotilla.Budget) > 0 && flotilla.Pods > 0 {
		var cpu float64
		for _, c := range flotilla.Budget {
			cpu += c.CPUSeconds
		}
		h.CPUBound = ratio(float64(len(flotilla.Budget))*base.Budget["base"].CPUPerPodMillis, 1000*cpu/float64(flotilla.Pods))
	}
	if alone != nil && base != nil {
		h.AloneVsBaselineBound = ratio(alone.PodsPerSecondBound, base.PodsPerSecondBound)
		h.AloneVsBaselineRunning = ratio(alone.PodsPerSecondRunning, base.PodsPerSecondRunning)
	}
	return h
}

// throughput is pods ÷ the time from start to the latest of times; 0
// without times.
func throughput(start time.Time, pods int, times map[string]time.Time) float64 {
	if len(times) == 0 {
		return 0
	}
	d := latest(times).Sub(start).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(pods) / d
}

// meshTimes are when one cluster's pods were created, bound and Running.
type meshTimes struct {
	created, bound, running map[string]time.Time
}

// meshTotals are the aggregate figures of the clusters' bursts, all started
// at start (pods in all): throughput to bound and to Running of the pods
// that were (all but the lost ones),
// latencies over every pod, and the time to the last pod Running. Pod names
// are unique across clusters.
func meshTotals(start time.Time, pods int, clusters map[string]meshTimes) (r MeshRun) {
	created, bound, running := map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	for _, t := range clusters {
		maps.Copy(created, t.created)
		maps.Copy(bound, t.bound)
		maps.Copy(running, t.running)
	}
	r.Pods = pods
	r.PodsPerSecondBound = throughput(start, len(bound), bound)
	r.PodsPerSecondRunning = throughput(start, len(running), running)
	r.BoundMillis = percentiles(created, bound)
	r.RunningMillis = percentiles(created, running)
	if len(running) > 0 {
		r.Seconds = latest(running).Sub(start).Seconds()
	}
	return r
}

// mainMesh runs the mesh, prints its report and writes its JSON.
func mainMesh(cfg config, keep, hold bool) error {
	if cfg.Mesh < 2 {
		return fmt.Errorf("-mesh %d: a mesh has at least 2 clusters", cfg.Mesh)
	}
	report, err := runMesh(cfg, keep, hold)
	if err != nil {
		return err
	}
	fmt.Println(report.Markdown())
	name := filepath.Join(cfg.Out, cfg.meshStem()+"-"+time.Now().UTC().Format("20060102T150405")+".json")
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(report, "", "  ")
	if err := os.WriteFile(name, raw, 0o644); err != nil {
		return err
	}
	fmt.Println("results written to", name)
	return nil
}

// meshStem names a mesh run's files in -out: its clusters, nodes, bursts,
// rate, candidates and budget.
func (c config) meshStem() string {
	capped := ""
	if c.CPUPerCluster > 0 {
		capped = fmt.Sprintf("-cpu%g", c.CPUPerCluster)
	}
	pods := strconv.Itoa(c.Pods)
	if len(c.MeshPods) > 0 {
		var each []string
		for _, n := range c.MeshPods {
			each = append(each, strconv.Itoa(n))
		}
		pods = strings.Join(each, "-")
	}
	return fmt.Sprintf("mesh-n%d-m%d-p%s-r%g-c%d%s", c.Mesh, c.Nodes, pods, c.Rate, c.MaxCandidates, capped)
}

// meshProfilePath is where a mesh run's profile of kind goes.
func (c config) meshProfilePath(kind string) string {
	return filepath.Join(c.Out, c.meshStem()+"-"+kind+".pprof")
}

// runMesh starts the sandbox (m1..mN with M nodes each, base with all N×M)
// and measures, in this order: the baseline, the clusters alone, then,
// once the pods of that run are gone, the Flotilla mesh.
func runMesh(cfg config, keep, hold bool) (*MeshReport, error) {
	// The baseline, the clusters alone, the Flotilla run, the clean-up.
	ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.Timeout+10*time.Minute)
	defer cancel()
	var opts sandbox.Options
	base := sandbox.ClusterSpec{Name: "base", WithoutRelease: true}
	for k := 1; k <= cfg.Mesh; k++ {
		spec := sandbox.ClusterSpec{Name: fmt.Sprintf("m%d", k)}
		for m := range cfg.Nodes {
			// As run's: 64 CPUs; -node-pods pods (1,000 by default: room
			// for every pod on any cluster's nodes).
			n := sandbox.NodeSpec{Name: fmt.Sprintf("m%d-n%d", k, m), CPU: "64", Pods: cfg.NodePods}
			spec.Nodes = append(spec.Nodes, n)
			base.Nodes = append(base.Nodes, n)
		}
		opts.Clusters = append(opts.Clusters, spec)
	}
	opts.Clusters = append(opts.Clusters, base)
	s, stop, err := startSandbox(ctx, &cfg, opts, "flotilla-bench-mesh-", keep)
	if err != nil {
		return nil, err
	}
	defer stop()
	for _, c := range s.Clusters {
		if err := createNamespace(ctx, c); err != nil {
			return nil, err
		}
	}
	var mesh []*sandbox.Cluster
	for k := 1; k <= cfg.Mesh; k++ {
		mesh = append(mesh, s.Cluster(fmt.Sprintf("m%d", k)))
	}
	agents, pprofAddr, err := startMeshAgents(ctx, cfg, mesh)
	if err != nil {
		return nil, err
	}
	report := &MeshReport{Config: cfg, Date: time.Now().UTC().Format(time.RFC3339)}

	baseCfg := cfg
	baseCfg.Pods = cfg.meshPods()
	fmt.Fprintf(os.Stderr, "bench: baseline run (plain kube-scheduler, one cluster, %d pods)\n", baseCfg.Pods)
	baseCluster := s.Cluster("base")
	report.Baseline, err = measure(ctx, baseCfg, s.Clusters, baseCluster, nil, podShape{}, []process{{"scheduler", baseCluster.PIDs()[sandbox.Scheduler]}})
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}

	if report.AloneLeftOut = cfg.aloneLeftOut(); report.AloneLeftOut != "" {
		fmt.Fprintf(os.Stderr, "bench: the clusters alone left out: %s\n", report.AloneLeftOut)
	} else {
		fmt.Fprintln(os.Stderr, "bench: the clusters alone (plain kube-scheduler in each)")
		var aloneProcs []process
		for _, c := range mesh {
			aloneProcs = append(aloneProcs, process{c.Name + " scheduler", c.PIDs()[sandbox.Scheduler]})
		}
		if report.Alone, err = meshMeasure(ctx, cfg, s.Clusters, mesh, false, aloneProcs); err != nil {
			return nil, fmt.Errorf("clusters alone: %w", err)
		}
		if err := removeMeshPods(ctx, cfg, mesh, "alone"); err != nil {
			return nil, err
		}
	}

	fmt.Fprintln(os.Stderr, "bench: flotilla mesh run")
	var procs []process
	for i, c := range mesh {
		procs = append(procs, process{c.Name + " agent", agents[i].PID()}, process{c.Name + " flotilla-scheduler", c.PIDs()[sandbox.CandidateScheduler]})
	}
	profiled := startMeshProfiles(ctx, cfg, mesh[0], pprofAddr)
	if report.Flotilla, err = meshMeasure(ctx, cfg, s.Clusters, mesh, true, procs); err != nil {
		return nil, fmt.Errorf("flotilla mesh: %w", err)
	}
	if err := profiled(); err != nil {
		return nil, err
	}
	report.Ratios = meshHeadline(report.Flotilla, report.Alone, report.Baseline)
	if hold {
		fmt.Println(report.Markdown())
		fmt.Fprintf(os.Stderr, "bench: clusters up in %s; interrupt to stop\n", s.Dir)
		sig, unnotify := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer unnotify()
		<-sig.Done()
	}
	return report, nil
}

// startMeshAgents runs every cluster's agent, each a source with the agent
// configuration of -max-candidates and -agent-gomemlimit and, with -mesh-self, its
// own cluster as a self target; then has every cluster invite every other
// one and reach it with the invited identity (-invite, as run does with
// its source), or with admin kubeconfigs (-invite=false).
func startMeshAgents(ctx context.Context, cfg config, mesh []*sandbox.Cluster) (agents []*sandbox.Agent, pprofAddr string, err error) {
	release, pprofAddr, err := sourceAgentRelease(cfg)
	if err != nil {
		return nil, "", err
	}
	for k, c := range mesh {
		if k == 1 && pprofAddr != "" {
			// Only the first cluster's agent serves its pprof (-profile).
			release.AgentArgs = slices.DeleteFunc(slices.Clone(release.AgentArgs), func(a string) bool { return strings.HasPrefix(a, "--pprof-bind-address=") })
		}
		var targets []*sandbox.Cluster
		if cfg.MeshSelf {
			targets = append(targets, c)
		}
		if !cfg.Invite {
			targets = mesh
			if !cfg.MeshSelf {
				targets = others(mesh, c)
			}
		}
		a, err := sandbox.StartAgentWith(ctx, c, targets, release)
		if err != nil {
			return nil, "", err
		}
		if cfg.MeshSelf && cfg.MeshLocalFirst {
			if err := c.SetLocalFirst(ctx, c.Name, namespace); err != nil {
				return nil, "", err
			}
		}
		agents = append(agents, a)
	}
	if cfg.Invite {
		// Every agent runs: each can answer its invitations.
		for _, c := range mesh {
			if err := invite(ctx, c, others(mesh, c)); err != nil {
				return nil, "", err
			}
		}
	}
	return agents, pprofAddr, nil
}

// startMeshProfiles takes, from now on, a CPU profile of the first mesh
// cluster's agent (-profile) and of its API server (-profile-apiserver), as
// run does for its source; the function returned waits for them.
func startMeshProfiles(ctx context.Context, cfg config, first *sandbox.Cluster, pprofAddr string) func() error {
	var waits []func() error
	start := func(kind string, save func(path string) error) {
		path := cfg.meshProfilePath(first.Name + "-" + kind)
		done := make(chan error, 1)
		go func() { done <- save(path) }()
		waits = append(waits, func() error {
			if err := <-done; err != nil {
				return fmt.Errorf("profiling %s's %s: %w", first.Name, kind, err)
			}
			fmt.Fprintf(os.Stderr, "bench: %s profile written to %s\n", first.Name, path)
			return nil
		})
	}
	if pprofAddr != "" {
		start("agent-cpu", func(path string) error {
			return saveProfile(ctx, pprofAddr, fmt.Sprintf("profile?seconds=%d", cfg.ProfileSeconds), path)
		})
	}
	if *profileAPIServer {
		start("apiserver-cpu", func(path string) error {
			return saveSecureProfile(ctx, first.RESTConfig(), *profileAPISeconds, path)
		})
	}
	return func() error {
		for _, wait := range waits {
			if err := wait(); err != nil {
				return err
			}
		}
		return nil
	}
}

// others are the clusters of mesh but c.
func others(mesh []*sandbox.Cluster, c *sandbox.Cluster) []*sandbox.Cluster {
	var out []*sandbox.Cluster
	for _, o := range mesh {
		if o != c {
			out = append(out, o)
		}
	}
	return out
}

// meshHome is one cluster of a mesh run and what its informer saw.
type meshHome struct {
	c *sandbox.Cluster
	// pods is its burst.
	pods    int
	mu      sync.Mutex
	t       meshTimes
	deleted map[string]bool
	before  Requests
	factory informers.SharedInformerFactory
}

// runName is the value of meshRunLabel of a run's pods.
func runName(optIn bool) string {
	if optIn {
		return "flotilla"
	}
	return "alone"
}

// meshMeasure makes its burst of pods in each cluster of mesh, all bursts
// started at once (opted in to Flotilla or not), and times them as measure
// does, each cluster's pods watched by an informer in that cluster.
func meshMeasure(ctx context.Context, cfg config, all, mesh []*sandbox.Cluster, optIn bool, procs []process) (*MeshRun, error) {
	run := runName(optIn)
	labels := map[string]string{"bench": "true", meshRunLabel: run}
	// Not the candidates of this cluster's own pods (self target) or of
	// the others' pods (a target that keeps source labels gives them the
	// pods' labels).
	selector := fmt.Sprintf("bench=true,%s=%s,!%s", meshRunLabel, run, protocol.CandidateLabel)
	stop := make(chan struct{})
	defer close(stop)
	var homes []*meshHome
	for k, c := range mesh {
		h := &meshHome{c: c, pods: cfg.burst(k), t: meshTimes{created: map[string]time.Time{}, bound: map[string]time.Time{}, running: map[string]time.Time{}}, deleted: map[string]bool{}}
		var err error
		if h.before, err = scrapeRequests(ctx, c); err != nil {
			return nil, err
		}
		h.factory = informers.NewSharedInformerFactoryWithOptions(c.Client(), 0, informers.WithNamespace(namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
		see := func(obj any) {
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			now := time.Now()
			h.mu.Lock()
			defer h.mu.Unlock()
			if _, seen := h.t.bound[pod.Name]; !seen && pod.Spec.NodeName != "" {
				h.t.bound[pod.Name] = now
			}
			if _, seen := h.t.running[pod.Name]; !seen && pod.Status.Phase == corev1.PodRunning {
				h.t.running[pod.Name] = now
			}
		}
		gone := func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				h.mu.Lock()
				h.deleted[pod.Name] = true
				h.mu.Unlock()
			}
		}
		_, _ = h.factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }, DeleteFunc: gone})
		h.factory.Start(stop)
		h.factory.WaitForCacheSync(stop)
		homes = append(homes, h)
	}
	podLabels := maps.Clone(labels)
	if optIn {
		podLabels[protocol.ElectLabel] = "true"
	}
	cpuBefore := map[string]float64{}
	for _, p := range procs {
		cpuBefore[p.name], _ = readProc(p.pid)
	}
	cpuStart := machineCPU(all)
	cgBefore := cfg.budget.sample()
	start := time.Now()
	errs := make(chan error, len(homes))
	var createRetries atomic.Int64
	for _, h := range homes {
		go func() {
			burst := cfg
			burst.Pods = h.pods
			errs <- createPods(ctx, burst, h.c, h.c.Name+"-"+run, podLabels, &h.mu, h.t.created, &createRetries)
		}()
	}
	var createErr error
	for range homes {
		if err := <-errs; err != nil && createErr == nil {
			createErr = err
		}
	}
	if createErr != nil {
		return nil, createErr
	}
	counts := func() (string, bool) {
		var parts []string
		done := true
		for _, h := range homes {
			h.mu.Lock()
			nb, nr := len(h.t.bound), len(h.t.running)
			lostBound, lost := goneBefore(h.deleted, h.t.bound), goneBefore(h.deleted, h.t.running)
			h.mu.Unlock()
			// A pod deleted before it was bound (Running) never will be.
			done = done && nb+lostBound == h.pods && nr+lost == h.pods
			parts = append(parts, fmt.Sprintf("%s: %d bound, %d Running, %d deleted before Running", h.c.Name, nb, nr, lost))
		}
		return strings.Join(parts, "; "), done
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		_, done := counts()
		return done, nil
	})
	cgAfter, window := cfg.budget.sample(), time.Since(start)
	if err != nil {
		text, _ := counts()
		return nil, fmt.Errorf("not every pod bound and Running (or deleted) after %s: %s", cfg.Timeout, text)
	}
	times := map[string]meshTimes{}
	for _, h := range homes {
		h.mu.Lock()
		times[h.c.Name] = meshTimes{created: maps.Clone(h.t.created), bound: maps.Clone(h.t.bound), running: maps.Clone(h.t.running)}
		h.mu.Unlock()
	}
	r := meshTotals(start, cfg.meshPods(), times)
	r.CreateRetries = createRetries.Load()
	r.Clusters = map[string]*MeshCluster{}
	for _, h := range homes {
		t := times[h.c.Name]
		h.mu.Lock()
		deleted, lost := len(h.deleted), goneBefore(h.deleted, h.t.running)
		h.mu.Unlock()
		r.Lost += lost
		mc := &MeshCluster{
			Deleted:              deleted,
			Lost:                 lost,
			Pods:                 h.pods,
			PodsPerSecondBound:   throughput(start, len(t.bound), t.bound),
			PodsPerSecondRunning: throughput(start, len(t.running), t.running),
			BoundMillis:          percentiles(t.created, t.bound),
			RunningMillis:        percentiles(t.created, t.running),
			PodsByNode:           map[string]int{},
		}
		for _, obj := range h.factory.Core().V1().Pods().Informer().GetStore().List() {
			if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
				mc.PodsByNode[pod.Spec.NodeName]++
			}
		}
		after, err := scrapeRequests(ctx, h.c)
		if err != nil {
			return nil, err
		}
		mc.Requests = perPod(h.before, after, cfg.perCluster())
		r.Clusters[h.c.Name] = mc
	}
	// Read after the request counts, which it would add to.
	for _, h := range homes {
		var keys []string
		for name := range times[h.c.Name].created {
			keys = append(keys, namespace+"/"+name)
		}
		var err error
		if r.Clusters[h.c.Name].EventsByReason, err = eventsByReason(ctx, h.c, keys); err != nil {
			return nil, err
		}
	}
	for _, p := range procs {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.pid)); err != nil {
			fmt.Fprintf(os.Stderr, "bench: warning: %s (pid %d) exited during the run\n", p.name, p.pid)
			r.Processes = append(r.Processes, ProcessCost{Name: p.name, Exited: true})
			continue
		}
		cpu, rss := readProc(p.pid)
		r.Processes = append(r.Processes, ProcessCost{Name: p.name, CPUSeconds: cpu - cpuBefore[p.name], PeakRSSMiB: rss})
	}
	cpuEnd := machineCPU(all)
	r.MachineCPUSeconds = cpuEnd.total - cpuStart.total
	r.CPUByCluster = map[string]float64{}
	var names []string
	for _, c := range mesh {
		r.CPUByCluster[c.Name] = cpuEnd.byCluster[c.Name] - cpuStart.byCluster[c.Name]
		names = append(names, c.Name)
	}
	if cfg.budget != nil {
		r.Budget = budgetOf(cfg.budget.coresOf, names, cgBefore, cgAfter, window.Seconds(), cfg.perCluster(), func(name string) float64 { return r.CPUByCluster[name] })
	}
	return &r, nil
}

// removeMeshPods deletes the pods of a mesh run in every cluster and waits
// until none is left, so that the next run starts on empty nodes.
func removeMeshPods(ctx context.Context, cfg config, mesh []*sandbox.Cluster, run string) error {
	// The run's pods, and their candidates in the other clusters, which
	// carry the run's label renamed (protocol.CarriedLabelKey).
	carried, _ := protocol.CarriedLabelKey(meshRunLabel)
	sels := []metav1.ListOptions{{LabelSelector: meshRunLabel + "=" + run}, {LabelSelector: carried + "=" + run}}
	for _, c := range mesh {
		for _, sel := range sels {
			err := c.Client().CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, sel)
			if err != nil {
				return fmt.Errorf("cluster %s: deleting the pods of run %s: %w", c.Name, run, err)
			}
		}
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		for _, c := range mesh {
			for _, sel := range sels {
				pods, err := c.Client().CoreV1().Pods(namespace).List(ctx, sel)
				if err != nil {
					last = err.Error()
					return false, nil
				}
				if n := len(pods.Items); n > 0 {
					last = fmt.Sprintf("%d pods left in %s", n, c.Name)
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the pods of run %s to be gone: %s: %w", run, last, err)
	}
	return nil
}

// Markdown renders the mesh report: the headline ratios, the aggregate
// figures of the three runs, each cluster's burst, and the CPU budgets.
func (r *MeshReport) Markdown() string {
	var b strings.Builder
	c := r.Config
	f, alone, base := r.Flotilla, r.Alone, r.Baseline
	access := "admin kubeconfigs"
	if c.Invite {
		access = "invited (ClusterSource per pair)"
	}
	self := "each cluster also its own target (self)"
	if c.MeshLocalFirst {
		self = "each cluster also its own target (self, localFirst)"
	}
	if !c.MeshSelf {
		self = "no cluster its own target"
	}
	budgetText := "uncapped (every process shares the machine)"
	if c.CPUPerCluster > 0 {
		budgetText = fmt.Sprintf("%g cores per cluster (%s)", c.CPUPerCluster, c.CgroupVersion)
	}
	meshCands := "every target"
	if c.MaxCandidates > 0 && c.MaxCandidates < c.Mesh-boolInt(!c.MeshSelf) {
		meshCands = fmt.Sprintf("%d target(s)", c.MaxCandidates)
	}
	bursts := fmt.Sprintf("P=%d pods each", c.Pods)
	if len(c.MeshPods) > 0 {
		var each []string
		for k := range c.Mesh {
			each = append(each, fmt.Sprintf("m%d %d", k+1, c.burst(k)))
		}
		bursts = "bursts of " + strings.Join(each, ", ")
	}
	fmt.Fprintf(&b, "### Mesh: N=%d clusters × M=%d nodes of %d pods, %s (%d in all), rate %s, candidates to %s, %s, %s, CPU %s, %s\n\n",
		c.Mesh, c.Nodes, c.NodePods, bursts, c.meshPods(), rateText(c.Rate), meshCands, self, access, budgetText, r.Date)
	if f == nil || base == nil || (alone == nil && r.AloneLeftOut == "") {
		fmt.Fprintln(&b, "(incomplete)")
		return b.String()
	}
	if alone == nil {
		// Its cells read 0 and its ratios "-".
		alone = &MeshRun{}
		fmt.Fprintf(&b, "The clusters alone were not run: %s.\n\n", r.AloneLeftOut)
	}
	h := r.Ratios
	if h.CPUBound > 0 {
		fmt.Fprintf(&b, "If CPU alone bounds both, the budgets allow the mesh %.2f× the baseline: N × the baseline's CPU per pod ÷ the mesh's CPU per pod (every mesh cluster's CPU ÷ N×P; see the CPU budget below).\n\n", h.CPUBound)
	}
	if f.Lost > 0 {
		fmt.Fprintf(&b, "**%d of the Flotilla run's %d pods were deleted before they ran** (see the Events below: `TaintManagerEviction` is kube-controller-manager evicting source pods from a virtual node tainted NotReady); its rates to bound and to Running count the pods that were bound (Running).\n\n", f.Lost, f.Pods)
	}
	fmt.Fprintf(&b, "**Flotilla mesh ÷ one baseline cluster: %.2f× to bound, %.2f× to Running** (the goal for N=3: ≥ 2×).", h.VsBaselineBound, h.VsBaselineRunning)
	if r.AloneLeftOut == "" {
		fmt.Fprintf(&b, " **Flotilla mesh ÷ the %d clusters alone: %.2f× to bound, %.2f× to Running.**", c.Mesh, h.VsAloneBound, h.VsAloneRunning)
	}
	fmt.Fprint(&b, "\n\n")
	fmt.Fprintf(&b, "Baseline: the one cluster `base` with the mesh's N×M = %d nodes placing the mesh's %d pods with kube-scheduler, one burst, in the same quota as each mesh cluster. Alone: the same N clusters, each placing its own burst (not opted in) with its own kube-scheduler, all bursts at once, before the Flotilla run on the same clusters (its pods deleted in between).\n\n", c.Mesh*c.Nodes, c.meshPods())
	fmt.Fprintln(&b, "| figure | flotilla mesh | clusters alone | one baseline cluster | mesh ÷ alone | mesh ÷ baseline |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|")
	row := func(name string, fv, av, bv float64, format string) {
		fmt.Fprintf(&b, "| %s | "+format+" | "+format+" | "+format+" | %s | %s |\n", name, fv, av, bv, ratioText(fv, av), ratioText(fv, bv))
	}
	row("pods", float64(f.Pods), float64(alone.Pods), float64(base.Pods), "%.0f")
	row("pods deleted before they ran", float64(f.Lost), float64(alone.Lost), 0, "%.0f")
	row("aggregate pods/s to bound", f.PodsPerSecondBound, alone.PodsPerSecondBound, base.PodsPerSecondBound, "%.1f")
	row("aggregate pods/s to Running", f.PodsPerSecondRunning, alone.PodsPerSecondRunning, base.PodsPerSecondRunning, "%.1f")
	row("p50 create→bound, ms", f.BoundMillis.P50, alone.BoundMillis.P50, base.BoundMillis.P50, "%.0f")
	row("p99 create→bound, ms", f.BoundMillis.P99, alone.BoundMillis.P99, base.BoundMillis.P99, "%.0f")
	row("p99 create→Running, ms", f.RunningMillis.P99, alone.RunningMillis.P99, base.RunningMillis.P99, "%.0f")
	row("first create → last Running, s", f.Seconds, alone.Seconds, base.Seconds, "%.1f")
	row("CPU of all sandbox processes, s", f.MachineCPUSeconds, alone.MachineCPUSeconds, base.MachineCPUSeconds, "%.1f")
	row("cores busy during the run (of 2)", ratio(f.MachineCPUSeconds, f.Seconds), ratio(alone.MachineCPUSeconds, alone.Seconds), ratio(base.MachineCPUSeconds, base.Seconds), "%.2f")

	var names []string
	for n := range f.Clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprint(&b, "\nEach cluster's own burst (pods/s from the run's first create call to its own last pod; API requests are all those its API server served during the run ÷ the mesh's pods ÷ N):\n\n")
	fmt.Fprintln(&b, "| run | cluster | pods/s to bound | pods/s to Running | p50 / p99 create→bound, ms | its pods ran in (at the end) | deleted during the run (before Running) | API requests/pod (writes) |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|")
	for _, run := range []struct {
		name string
		r    *MeshRun
	}{{"alone", alone}, {"flotilla", f}} {
		for _, n := range names {
			mc := run.r.Clusters[n]
			if mc == nil {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %.0f / %.0f | %s | %d (%d) | %.1f (%.1f) |\n", run.name, n, mc.PodsPerSecondBound, mc.PodsPerSecondRunning,
				mc.BoundMillis.P50, mc.BoundMillis.P99, placedText(mc.PodsByNode), mc.Deleted, mc.Lost, mc.Requests.All, mc.Requests.Writes)
		}
	}
	baseReq := base.Requests["base"]
	fmt.Fprintf(&b, "| baseline | base | %.1f | %.1f | %.0f / %.0f | %d nodes | - | %.1f (%.1f) |\n", base.PodsPerSecondBound, base.PodsPerSecondRunning, base.BoundMillis.P50, base.BoundMillis.P99, len(base.PodsByNode), baseReq.All, baseReq.Writes)
	fmt.Fprintf(&b, "\nEvents of the Flotilla run's pods, per pod of all clusters (with repeats): %s.\n", eventsText(f))
	for _, p := range f.Processes {
		if p.Exited {
			fmt.Fprintf(&b, "\n**%s: exited during the run** (see its log with -keep).", p.Name)
			continue
		}
		fmt.Fprintf(&b, "\n%s: %.1f s CPU, peak RSS %.0f MiB.", p.Name, p.CPUSeconds, p.PeakRSSMiB)
	}
	fmt.Fprintln(&b)
	r.meshBudgetMarkdown(&b, names)
	return b.String()
}

// meshBudgetMarkdown is the table of each capped cluster's CPU in the
// three runs; a mesh cluster's CPU per pod counts its own P pods, the
// baseline's its N×P.
func (r *MeshReport) meshBudgetMarkdown(b *strings.Builder, names []string) {
	f, alone, base := r.Flotilla, r.Alone, r.Baseline
	if len(base.Budget) == 0 || len(f.Budget) == 0 {
		return
	}
	budgetHead(b, r.Config, "from the first create to the last pod Running of the run; CPU per pod is a mesh cluster's CPU ÷ the mesh's pods ÷ N (its own burst when all are P; it also served the others' candidates), the baseline's ÷ all the mesh's pods")
	baseline := base.Budget["base"].CPUPerPodMillis
	budgetLine(b, "baseline", "base", base.Budget["base"], baseline)
	for _, n := range names {
		if alone == nil {
			break
		}
		if c, ok := alone.Budget[n]; ok {
			budgetLine(b, "alone", n, c, baseline)
		}
	}
	for _, n := range names {
		if c, ok := f.Budget[n]; ok {
			budgetLine(b, "flotilla", n, c, baseline)
		}
	}
}

// placedText renders where a cluster's pods ran: "m1 134, m2 133, ..." by
// virtual node (flotilla-<target>), else by node.
func placedText(byNode map[string]int) string {
	counts := map[string]int{}
	for node, n := range byNode {
		if t, ok := strings.CutPrefix(node, "flotilla-"); ok {
			counts[t] += n
		} else {
			counts["own nodes"] += n
		}
	}
	return zoneText(counts)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// eventsText renders the Events of a mesh run's pods by reason, summed
// over its clusters, per pod: "FannedOut 1.00, Scheduled 1.00".
func eventsText(r *MeshRun) string {
	sum := map[string]int{}
	for _, c := range r.Clusters {
		for reason, n := range c.EventsByReason {
			sum[reason] += n
		}
	}
	if len(sum) == 0 || r.Pods == 0 {
		return "none"
	}
	return keyedText(sum, func(n int) string { return fmt.Sprintf("%.2f", float64(n)/float64(r.Pods)) })
}

// goneBefore counts the deleted pods not in seen: deleted before they were
// bound, or Running.
func goneBefore(deleted map[string]bool, seen map[string]time.Time) int {
	n := 0
	for name := range deleted {
		if _, ok := seen[name]; !ok {
			n++
		}
	}
	return n
}
