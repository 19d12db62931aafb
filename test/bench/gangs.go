package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// GangRun is one placement of GangCount gangs of Size members each, all
// created at once.
type GangRun struct {
	Size      int `json:"size"`
	GangCount int `json:"gangs"`
	// Seconds is from the first create to the last gang Running whole.
	Seconds        float64 `json:"seconds"`
	GangsPerSecond float64 `json:"gangsPerSecond"`
	// StartMillis is, per gang, from its first member's creation to its
	// last member Running.
	StartMillis Percentiles `json:"startMillis"`
	// PeakReserved is the most candidates of the run's members that held
	// a reservation in the targets at once, sampled every second
	// (Flotilla only); MeanReserved their mean over the samples.
	PeakReserved int     `json:"peakReserved,omitempty"`
	MeanReserved float64 `json:"meanReserved,omitempty"`
	// Released counts the reservations of the run's candidates that ended
	// without a binding, and ReleasedSeconds how long they held their
	// nodes' room in all, as the targets' schedulers count them
	// (flotilla_candidates_unreserved_total and _held_seconds_total):
	// what gangs kept from other pods while they waited (Flotilla only).
	Released        int     `json:"released,omitempty"`
	ReleasedSeconds float64 `json:"releasedSeconds,omitempty"`
	// ReleasedBy splits Released by the scheduler's reason (denied,
	// share-expired, ...).
	ReleasedBy map[string]int `json:"releasedBy,omitempty"`
	// Started counts the gangs Running whole by the end (all, unless the
	// run timed out).
	Started int `json:"started"`
	// Budget is each capped cluster's CPU from its cgroup, from the first
	// create to the last member Running, per member (with
	// -cpu-per-cluster): which cluster's quota bounds the run.
	Budget map[string]ClusterBudget `json:"budget,omitempty"`
	// SourceRequests are the home cluster's API requests per member in
	// the same window, its writes by kind.
	SourceRequests Requests `json:"sourceRequests"`
	// TargetRequests are all targets' API requests per member in the same
	// window, added up (Flotilla only): their pod creates are the
	// candidates, their pod PATCHes the reports, allowances and denials.
	TargetRequests Requests `json:"targetRequests"`
	// HomeCPUMillis is the CPU of each process of the home cluster
	// (kube-apiserver, etcd, the agent, ...) per member, in the same
	// window, from /proc.
	HomeCPUMillis map[string]float64 `json:"homeCPUMillis,omitempty"`
	// RoundsPerMember are the source agent's placement rounds
	// (reconciles) per member in the same window (Flotilla only).
	RoundsPerMember float64 `json:"roundsPerMember,omitempty"`
	// RoundsByState are RoundsPerMember by the state of the source pod
	// each round found (flotilla_placement_rounds_total's pod label:
	// waiting, elected, bound, deleting, gone, stale).
	RoundsByState map[string]float64 `json:"roundsByState,omitempty"`
}

// GangReport is the -gangs bench's result.
type GangReport struct {
	Config   config     `json:"config"`
	Date     string     `json:"date"`
	Sizes    []int      `json:"sizes"`
	Flotilla []*GangRun `json:"flotilla"`
	Baseline []*GangRun `json:"baseline"`
}

// mainGangs runs the -gangs bench: for each gang size, cfg.GangCount
// gangs of 100m members placed through Flotilla (anyClusters, over K
// targets that invite the source) and by kube-scheduler's own gang
// scheduling in the baseline cluster holding every node (each gang a
// PodGroup whose gang policy asks for all its members), in the
// same run, each cluster in its CPU cgroup.
func mainGangs(cfg config, sizes []int, keep bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(2*len(sizes))*cfg.Timeout+10*time.Minute)
	defer cancel()
	opts := sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "src", Nodes: []sandbox.NodeSpec{{}}, SourceOnly: cfg.SourceOnly}}}
	base := sandbox.ClusterSpec{Name: "base", WithoutRelease: true, APIServerArgs: sandbox.WorkloadAPI, SchedulerArgs: sandbox.GangScheduling}
	for k := 1; k <= cfg.Targets; k++ {
		spec := sandbox.ClusterSpec{Name: fmt.Sprintf("t%d", k), PermitTimeoutSeconds: cfg.PermitTimeoutSeconds}
		for m := range cfg.Nodes {
			n := sandbox.NodeSpec{Name: fmt.Sprintf("t%d-n%d", k, m), CPU: "64", Pods: 1000}
			spec.Nodes = append(spec.Nodes, n)
			base.Nodes = append(base.Nodes, n)
		}
		opts.Clusters = append(opts.Clusters, spec)
	}
	opts.Clusters = append(opts.Clusters, base)
	s, stop, err := startSandbox(ctx, &cfg, opts, "flotilla-bench-gangs-", keep)
	if err != nil {
		return err
	}
	defer stop()
	src, baseCluster := s.Cluster("src"), s.Cluster("base")
	var targets []*sandbox.Cluster
	for k := 1; k <= cfg.Targets; k++ {
		targets = append(targets, s.Cluster(fmt.Sprintf("t%d", k)))
	}
	for _, c := range s.Clusters {
		if err := createNamespace(ctx, c); err != nil {
			return err
		}
	}
	for _, t := range targets {
		if _, err := sandbox.StartAgent(ctx, t, nil); err != nil {
			return err
		}
	}
	release, pprofAddr, err := sourceAgentRelease(cfg)
	if err != nil {
		return err
	}
	agent, err := sandbox.StartAgentWith(ctx, src, nil, release)
	if err != nil {
		return err
	}
	if err := invite(ctx, src, targets); err != nil {
		return err
	}
	report := &GangReport{Config: cfg, Date: time.Now().UTC().Format(time.RFC3339), Sizes: sizes}
	for _, size := range sizes {
		fmt.Fprintf(os.Stderr, "bench: %d gangs of %d, baseline (kube-scheduler's gang scheduling)\n", cfg.GangCount, size)
		agentProfile := filepath.Join(cfg.Out, fmt.Sprintf("gangs-k%d-g%d-size%d-agent-cpu.pprof", cfg.Targets, cfg.GangCount, size))
		baseProfiled := startProfileOf(ctx, baseCluster.RESTConfig(), apiProfilePath(agentProfile, "base"), "base")
		b, err := gangRun(ctx, cfg, baseCluster, nil, "", size, false)
		if err != nil {
			return fmt.Errorf("baseline, gangs of %d: %w", size, err)
		}
		if err := baseProfiled(); err != nil {
			return err
		}
		report.Baseline = append(report.Baseline, b)
		fmt.Fprintf(os.Stderr, "bench: %d gangs of %d, Flotilla over %d targets\n", cfg.GangCount, size, cfg.Targets)
		profiled := make(chan error, 1)
		if cfg.Profile {
			// The source agent's CPU over the run's first -profile-seconds.
			go func() {
				profiled <- saveProfile(ctx, pprofAddr, fmt.Sprintf("profile?seconds=%d", cfg.ProfileSeconds), agentProfile)
			}()
		} else {
			profiled <- nil
		}
		apiProfiled := startProfileOf(ctx, src.RESTConfig(), apiProfilePath(agentProfile, "src"), "src")
		f, err := gangRun(ctx, cfg, src, targets, agent.MetricsAddr, size, true)
		if err != nil {
			return fmt.Errorf("Flotilla, gangs of %d: %w", size, err)
		}
		if err := <-profiled; err != nil {
			return err
		}
		if err := apiProfiled(); err != nil {
			return err
		}
		report.Flotilla = append(report.Flotilla, f)
	}
	fmt.Println(report.Markdown())
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return err
	}
	capped := ""
	if cfg.CPUPerCluster > 0 {
		capped = fmt.Sprintf("-cpu%g", cfg.CPUPerCluster)
		if cfg.Shape == shapeControlPlane {
			capped += "-cp"
		}
	}
	name := filepath.Join(cfg.Out, fmt.Sprintf("gangs-k%d-m%d-g%d%s-%s.json", cfg.Targets, cfg.Nodes, cfg.GangCount, capped, time.Now().UTC().Format("20060102T150405")))
	raw, _ := json.MarshalIndent(report, "", "  ")
	if err := os.WriteFile(name, raw, 0o644); err != nil {
		return err
	}
	fmt.Println("results written to", name)
	return nil
}

// gangPhases renders, for each phase (a time per member), the median over
// the gangs of its last member's time from the gang's first creation.
func gangPhases(created map[string]time.Time, phases map[string]map[string]time.Time) string {
	gangOf := func(name string) string { return name[:strings.LastIndex(name, "-")] }
	first := map[string]time.Time{}
	for name, t := range created {
		if f, ok := first[gangOf(name)]; !ok || t.Before(f) {
			first[gangOf(name)] = t
		}
	}
	var out []string
	for _, phase := range []string{"created", "elected", "bound", "running"} {
		last := map[string]time.Time{}
		for name, t := range phases[phase] {
			if t.After(last[gangOf(name)]) {
				last[gangOf(name)] = t
			}
		}
		var ms []float64
		for g, t := range last {
			ms = append(ms, float64(t.Sub(first[g]).Milliseconds()))
		}
		if len(ms) == 0 {
			continue
		}
		sort.Float64s(ms)
		out = append(out, fmt.Sprintf("%s %.0f ms", phase, ms[len(ms)/2]))
	}
	return strings.Join(out, ", ")
}

// gangRun creates cfg.GangCount gangs of size members in home at once and
// times each from its first member's creation to its last member Running;
// then deletes them and waits until they, and their candidates in
// targets, are gone.
// agentMetrics is the address of the home agent's /metrics ("" for none).
func gangRun(ctx context.Context, cfg config, home *sandbox.Cluster, targets []*sandbox.Cluster, agentMetrics string, size int, flotilla bool) (*GangRun, error) {
	pods := home.Client().CoreV1().Pods(namespace)
	prefix := fmt.Sprintf("g%d-", size)
	// An informer, not a bare watch: it watches again when the API
	// server ends a watch, which a saturated one does.
	var mu sync.Mutex
	created, running := map[string]time.Time{}, map[string]time.Time{}
	// When each member was first seen elected (Flotilla) and bound: the
	// phases of a gang's start (gangPhases).
	elected, bound := map[string]time.Time{}, map[string]time.Time{}
	factory := informers.NewSharedInformerFactoryWithOptions(home.Client(), 0, informers.WithNamespace(namespace))
	see := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || !strings.HasPrefix(p.Name, prefix) {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		stamp := func(m map[string]time.Time, cond bool) {
			if _, seen := m[p.Name]; cond && !seen {
				m[p.Name] = now
			}
		}
		e, _ := protocol.ParseElection(p.Annotations[protocol.ElectionAnnotation])
		stamp(elected, e.Elected())
		stamp(bound, p.Spec.NodeName != "")
		stamp(running, p.Status.Phase == corev1.PodRunning)
	}
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}); err != nil {
		return nil, err
	}
	informerCtx, stopInformer := context.WithCancel(ctx)
	defer stopInformer()
	factory.Start(informerCtx.Done())
	factory.WaitForCacheSync(informerCtx.Done())

	var samples []int
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		if !flotilla {
			return
		}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
			samples = append(samples, reservedCandidates(sampleCtx, targets))
		}
	}()

	var releasedBefore released
	if flotilla {
		var err error
		if releasedBefore, err = releasedReservations(ctx, targets); err != nil {
			return nil, err
		}
	}
	before, err := readCounters(ctx, home, targets, agentMetrics)
	if err != nil {
		return nil, err
	}
	procs := home.PIDs()
	cpuBefore := map[sandbox.Component]float64{}
	for comp, pid := range procs {
		cpuBefore[comp], _ = readProc(pid)
	}
	cgBefore := cfg.budget.sample()
	start := time.Now()
	for g := range cfg.GangCount {
		name := fmt.Sprintf("%s%d", prefix, g)
		if !flotilla {
			if _, err := home.Client().SchedulingV1beta1().PodGroups(namespace).Create(ctx, sandbox.GangPodGroup(name, int32(size)), metav1.CreateOptions{}); err != nil {
				return nil, err
			}
		}
		for m := range size {
			p := benchPod(fmt.Sprintf("%s-%d", name, m), map[string]string{"gang": name}, "100m")
			if flotilla {
				p.Labels[protocol.ElectLabel] = "true"
				p.Labels[protocol.PodGroupLabel] = name
				p.Annotations = map[string]string{protocol.GangMinMemberAnnotation: fmt.Sprint(size), protocol.GangModeAnnotation: protocol.GangAnyClusters}
			} else {
				sandbox.InSchedulingGroup(p, name)
			}
			t := time.Now()
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				return nil, err
			}
			mu.Lock()
			created[p.Name] = t
			mu.Unlock()
		}
	}
	members := cfg.GangCount * size
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(running) >= members, nil
	})
	cgAfter, window := cfg.budget.sample(), time.Since(start)
	homeCPU := map[string]float64{}
	for comp, pid := range procs {
		cpu, _ := readProc(pid)
		homeCPU[string(comp)] = 1000 * (cpu - cpuBefore[comp]) / float64(members)
	}
	after, err := readCounters(ctx, home, targets, agentMetrics)
	if err != nil {
		return nil, err
	}
	stopSampling()
	<-sampled
	var releasedAfter released
	if flotilla {
		var err error
		if releasedAfter, err = releasedReservations(ctx, targets); err != nil {
			return nil, err
		}
	}

	mu.Lock()
	fmt.Fprintf(os.Stderr, "bench: phases, p50 over the gangs of the last member's, from the gang's first creation: %s\n", gangPhases(created, map[string]map[string]time.Time{"created": created, "elected": elected, "bound": bound, "running": running}))
	r := &GangRun{Size: size, GangCount: cfg.GangCount}
	first, last := map[string]time.Time{}, map[string]time.Time{}
	whole := map[string]int{}
	for name, t := range created {
		gang := name[:strings.LastIndex(name, "-")]
		if f, ok := first[gang]; !ok || t.Before(f) {
			first[gang] = t
		}
		if rt, ok := running[name]; ok {
			whole[gang]++
			if rt.After(last[gang]) {
				last[gang] = rt
			}
		}
	}
	var end time.Time
	from, to := map[string]time.Time{}, map[string]time.Time{}
	for gang, n := range whole {
		if n < size {
			continue
		}
		r.Started++
		from[gang], to[gang] = first[gang], last[gang]
		if last[gang].After(end) {
			end = last[gang]
		}
	}
	mu.Unlock()
	if r.Started > 0 {
		r.Seconds = end.Sub(start).Seconds()
		r.GangsPerSecond = float64(r.Started) / r.Seconds
		r.StartMillis = percentiles(from, to)
	}
	for _, n := range samples {
		r.PeakReserved = max(r.PeakReserved, n)
		r.MeanReserved += float64(n) / float64(len(samples))
	}
	r.SourceRequests = perPod(before.home, after.home, float64(members))
	r.TargetRequests = perPod(before.targets, after.targets, float64(members))
	r.HomeCPUMillis = homeCPU
	r.RoundsPerMember, r.RoundsByState = roundsPer(after.rounds-before.rounds, before.roundsByState, after.roundsByState, float64(members))
	if cfg.budget != nil {
		clusters := []string{home.Name}
		for _, t := range targets {
			clusters = append(clusters, t.Name)
		}
		r.Budget = budgetOf(cfg.budget.coresOf, cfg.budget.names(clusters), cgBefore, cgAfter, window.Seconds(), float64(members), func(string) float64 { return -1 })
	}
	r.Released = int(releasedAfter.count - releasedBefore.count)
	r.ReleasedSeconds = releasedAfter.seconds - releasedBefore.seconds
	for reason, n := range releasedAfter.byReason {
		if d := int(n - releasedBefore.byReason[reason]); d > 0 {
			if r.ReleasedBy == nil {
				r.ReleasedBy = map[string]int{}
			}
			r.ReleasedBy[reason] = d
		}
	}

	// Clean up for the next run: the pods, their PodGroups, and the
	// candidates in the targets. An API server of 0.15 cores may run out
	// of time deleting hundreds of pods in one request (a timeout, or its
	// stream reset: it goes on, or stops where it was): the deletion is
	// asked again while pods are left at home, and the pods listed are
	// what says it is done.
	var asked time.Time
	var deleteErr error
	deleteAll := func() {
		if time.Since(asked) < 15*time.Second {
			// The last request may still be deleting.
			return
		}
		asked = time.Now()
		if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
			deleteErr = err
		}
	}
	deleteAll()
	if !flotilla {
		if err := home.Client().SchedulingV1beta1().PodGroups(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return nil, err
		}
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		for i, c := range append([]*sandbox.Cluster{home}, targets...) {
			l, err := c.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
			if err != nil || len(l.Items) > 0 {
				if i == 0 && err == nil {
					deleteAll()
				}
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the run's pods never went (the last failed deletion's error: %v): %w", deleteErr, err)
	}
	return r, nil
}

// placementRounds is the agent's count of placement reconciles so far,
// and of its rounds by the state of the pod each found
// (flotilla_placement_rounds_total), read from its /metrics at addr (0
// and nil when addr is "").
func placementRounds(ctx context.Context, addr string) (total float64, byState map[string]float64, err error) {
	if addr == "" {
		return 0, nil, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	byState = map[string]float64{}
	for line := range strings.Lines(string(body)) {
		name, _, v, ok := sample(strings.TrimSpace(line))
		switch {
		case !ok:
		case name == "controller_runtime_reconcile_total" && label(line, "controller") == "placement":
			total += v
		case name == "flotilla_placement_rounds_total":
			byState[label(line, "pod")] += v
		}
	}
	return total, byState, nil
}

// reservedCandidates counts the candidates in targets that hold a
// reservation.
func reservedCandidates(ctx context.Context, targets []*sandbox.Cluster) int {
	n := 0
	for _, t := range targets {
		l, err := t.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
		if err != nil {
			continue
		}
		for _, p := range l.Items {
			var st protocol.State
			if json.Unmarshal([]byte(p.Annotations[protocol.StateAnnotation]), &st) == nil && st.Phase == protocol.PhaseReserved {
				n++
			}
		}
	}
	return n
}

// released is what the targets' schedulers count of reservations that
// ended without a binding.
type released struct {
	count, seconds float64
	// byReason splits count by the metric's reason label.
	byReason map[string]float64
}

// releasedReservations sums, over the targets, their schedulers'
// flotilla_candidates_unreserved_total and
// flotilla_candidates_unreserved_held_seconds_total, every source and
// reason.
func releasedReservations(ctx context.Context, targets []*sandbox.Cluster) (released, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the sandbox's self-signed scheduler, on loopback
	r := released{byReason: map[string]float64{}}
	for _, t := range targets {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+t.SchedulerAddr()+"/metrics", nil)
		if err != nil {
			return r, err
		}
		req.Header.Set("Authorization", "Bearer "+t.RESTConfig().BearerToken)
		resp, err := client.Do(req)
		if err != nil {
			return r, fmt.Errorf("cluster %s: reading its scheduler's /metrics: %w", t.Name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return r, fmt.Errorf("cluster %s: reading its scheduler's /metrics: %w", t.Name, err)
		}
		if resp.StatusCode != http.StatusOK {
			return r, fmt.Errorf("cluster %s: reading its scheduler's /metrics: %s", t.Name, resp.Status)
		}
		for line := range strings.Lines(string(body)) {
			name, _, v, ok := sample(line)
			if !ok {
				continue
			}
			switch name {
			case "flotilla_candidates_unreserved_total":
				r.count += v
				r.byReason[label(line, "reason")] += v
			case "flotilla_candidates_unreserved_held_seconds_total":
				r.seconds += v
			}
		}
	}
	return r, nil
}

// Markdown is the report as a table, Flotilla against the baseline.
func (r *GangReport) Markdown() string {
	var b strings.Builder
	permit := ""
	if r.Config.PermitTimeoutSeconds > 0 {
		permit = fmt.Sprintf(", the targets' Permit timeout %d s", r.Config.PermitTimeoutSeconds)
	}
	fmt.Fprintf(&b, "## Gangs: %d gangs of each size, K=%d targets × %d nodes, %s%s\n\n", r.Config.GangCount, r.Config.Targets, r.Config.Nodes, budgetText(r.Config), permit)
	b.WriteString("| size | run | started | gangs/s | ratio | start p50 ms | start p99 ms | reservations held (peak / mean) | released unbound: reservations, seconds held |\n|---|---|---|---|---|---|---|---|---|\n")
	for i, size := range r.Sizes {
		base, fl := r.Baseline[i], r.Flotilla[i]
		fmt.Fprintf(&b, "| %d | kube-scheduler | %d/%d | %.2f | | %.0f | %.0f | | |\n", size, base.Started, base.GangCount, base.GangsPerSecond, base.StartMillis.P50, base.StartMillis.P99)
		var by []string
		for _, reason := range slices.Sorted(maps.Keys(fl.ReleasedBy)) {
			by = append(by, fmt.Sprintf("%s %d", reason, fl.ReleasedBy[reason]))
		}
		reasons := ""
		if len(by) > 0 {
			reasons = " (" + strings.Join(by, ", ") + ")"
		}
		fmt.Fprintf(&b, "| %d | Flotilla | %d/%d | %.2f | %s | %.0f | %.0f | %d / %.1f | %d, %.0f s%s |\n", size, fl.Started, fl.GangCount, fl.GangsPerSecond, ratioText(fl.GangsPerSecond, base.GangsPerSecond), fl.StartMillis.P50, fl.StartMillis.P99, fl.PeakReserved, fl.MeanReserved, fl.Released, fl.ReleasedSeconds, reasons)
	}
	if len(r.Sizes) > 0 && r.Baseline[0].Budget != nil {
		b.WriteString("\nEach capped cluster's CPU per member, and the share of its quota it used, from the first create to the last member Running (cgroup):\n\n| size | run | cluster | CPU/member | quota used |\n|---|---|---|---|---|\n")
		for i, size := range r.Sizes {
			for _, run := range r.runsOf(i) {
				for _, name := range slices.Sorted(maps.Keys(run.r.Budget)) {
					c := run.r.Budget[name]
					used := fmt.Sprintf("%.0f %%", 100*c.QuotaUsed)
					if strings.HasSuffix(name, workersGroup("")) {
						used = "uncapped"
					}
					fmt.Fprintf(&b, "| %d | %s | %s | %.1f ms | %s |\n", size, run.name, name, c.CPUPerPodMillis, used)
				}
			}
		}
	}
	b.WriteString("\nThe home cluster's processes' CPU per member (ms), same window:\n\n| size | run | by process |\n|---|---|---|\n")
	for i, size := range r.Sizes {
		for _, run := range r.runsOf(i) {
			var procs []string
			for _, p := range slices.Sorted(maps.Keys(run.r.HomeCPUMillis)) {
				procs = append(procs, fmt.Sprintf("%s %.1f", p, run.r.HomeCPUMillis[p]))
			}
			if run.r.RoundsPerMember > 0 {
				procs = append(procs, fmt.Sprintf("(the agent's placement rounds per member: %.1f; by the member's state: %s)", run.r.RoundsPerMember, statesText(run.r.RoundsByState)))
			}
			fmt.Fprintf(&b, "| %d | %s | %s |\n", size, run.name, strings.Join(procs, ", "))
		}
	}
	b.WriteString("\nAPI writes per member, by kind (resource[/subresource] verb), in the home cluster and in all targets together:\n\n| size | run | where | writes | by kind |\n|---|---|---|---|---|\n")
	for i, size := range r.Sizes {
		for _, run := range r.runsOf(i) {
			fmt.Fprintf(&b, "| %d | %s | home | %s |\n", size, run.name, writesText(run.r.SourceRequests))
			if run.r.TargetRequests.Writes > 0 {
				fmt.Fprintf(&b, "| %d | %s | targets | %s |\n", size, run.name, writesText(run.r.TargetRequests))
			}
		}
	}
	return b.String()
}

// writesText is r's writes, then by kind (those of 0.01 or more), as two
// table cells.
func writesText(r Requests) string {
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(r.WritesByKind)) {
		if n := r.WritesByKind[k]; n >= 0.01 {
			kinds = append(kinds, fmt.Sprintf("%s %.2f", k, n))
		}
	}
	return fmt.Sprintf("%.2f | %s", r.Writes, strings.Join(kinds, ", "))
}

// statesText lists rounds by state, in the states' order: "bound 1.0,
// elected 3.4".
func statesText(byState map[string]float64) string {
	var by []string
	for _, state := range slices.Sorted(maps.Keys(byState)) {
		by = append(by, fmt.Sprintf("%s %.1f", state, byState[state]))
	}
	return strings.Join(by, ", ")
}

// counters are what a gang run reads before its first create and after
// its last member runs: the home cluster's API requests, all targets'
// added up, and the home agent's placement rounds.
type counters struct {
	home, targets Requests
	rounds        float64
	roundsByState map[string]float64
}

// readCounters reads counters now; agentMetrics is the home agent's
// /metrics address ("" for none: no rounds).
func readCounters(ctx context.Context, home *sandbox.Cluster, targets []*sandbox.Cluster, agentMetrics string) (c counters, err error) {
	if c.home, err = scrapeRequests(ctx, home); err != nil {
		return c, err
	}
	if c.targets, err = scrapeAll(ctx, targets); err != nil {
		return c, err
	}
	c.rounds, c.roundsByState, err = placementRounds(ctx, agentMetrics)
	return c, err
}

// scrapeAll adds up the API requests of clusters so far (scrapeRequests).
func scrapeAll(ctx context.Context, clusters []*sandbox.Cluster) (Requests, error) {
	all := Requests{WritesByKind: map[string]float64{}}
	for _, c := range clusters {
		r, err := scrapeRequests(ctx, c)
		if err != nil {
			return all, err
		}
		all.All += r.All
		all.Writes += r.Writes
		for k, n := range r.WritesByKind {
			all.WritesByKind[k] += n
		}
	}
	return all, nil
}

// namedRun is a run of a gang report with what placed it.
type namedRun struct {
	name string
	r    *GangRun
}

// runsOf are the i-th size's runs, the baseline first.
func (r *GangReport) runsOf(i int) []namedRun {
	return []namedRun{{"kube-scheduler", r.Baseline[i]}, {"Flotilla", r.Flotilla[i]}}
}

// budgetText says how the clusters' CPU was shared.
func budgetText(c config) string {
	if c.CPUPerCluster > 0 && c.Shape == shapeControlPlane {
		return fmt.Sprintf("each cluster's control plane in a cgroup of %g cores (its agent, scheduler and kwok uncapped in <cluster>-workers, as on worker nodes)", c.CPUPerCluster)
	}
	if c.CPUPerCluster > 0 {
		return fmt.Sprintf("each cluster in a cgroup of %g cores", c.CPUPerCluster)
	}
	return "uncapped"
}

// parseSizes reads -gangs: gang sizes, comma-separated, each at least 1.
func parseSizes(raw string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(raw, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n < 1 {
			return nil, fmt.Errorf("-gangs %q: want gang sizes, comma-separated, each at least 1", raw)
		}
		sizes = append(sizes, n)
	}
	return slices.Clip(sizes), nil
}
