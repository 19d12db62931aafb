package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const namespace = "bench"

type process struct {
	name string
	pid  int
}

// Run is what one run measured.
type Run struct {
	Pods                 int                 `json:"pods"`
	Seconds              float64             `json:"seconds"`
	PodsPerSecondBound   float64             `json:"podsPerSecondBound"`
	PodsPerSecondRunning float64             `json:"podsPerSecondRunning"`
	BoundMillis          Percentiles         `json:"boundMillis"`
	RunningMillis        Percentiles         `json:"runningMillis"`
	Requests             map[string]Requests `json:"requestsPerPod"`
	Processes            []ProcessCost       `json:"processes"`
	// MachineCPUSeconds is the CPU every process of the sandbox used during
	// the run; divided by Seconds it says how busy the machine's cores were.
	MachineCPUSeconds float64 `json:"machineCPUSeconds"`
	// CPUByComponent splits MachineCPUSeconds by kind of process, summed
	// over the clusters (etcd, kube-apiserver, ..., agent).
	CPUByComponent map[string]float64 `json:"cpuByComponent"`
	// CPUByCluster splits MachineCPUSeconds by cluster (every process of a
	// cluster, the agent with its own). In production every cluster has its
	// own control plane and cores: the busiest one bounds the throughput.
	CPUByCluster map[string]float64 `json:"cpuByCluster"`
	// HomeCPUByComponent splits the CPU of the run's home cluster (the
	// source, or the baseline's one cluster) by kind of process.
	HomeCPUByComponent map[string]float64 `json:"homeCPUByComponent"`
	// CreateRetries counts the pod creates the API server failed and the
	// bench retried (a webhook call that timed out in a saturated source).
	CreateRetries int64 `json:"createRetries,omitempty"`
	// IdleCores (with -idle) is the home cluster's CPU by kind of process,
	// in cores, over a window before the run with nothing to place: what
	// it costs whether pods come or not.
	IdleCores map[string]float64 `json:"idleCores,omitempty"`
	// AgentLiveHeapMiB is the agent's heap right after a collection at the
	// end of the run (with -profile only).
	AgentLiveHeapMiB float64 `json:"agentLiveHeapMiB,omitempty"`
	// PodsByNode counts the run's pods by the node they were bound to (a
	// virtual node flotilla-<target> for Flotilla).
	PodsByNode map[string]int `json:"podsByNode"`
	// Budget is, with -cpu-per-cluster, what each cluster of the run (the
	// home cluster and the targets) used of its CPU quota.
	Budget map[string]ClusterBudget `json:"cpuBudget,omitempty"`
	// EventsByReason counts the Events of the run's pods in home by
	// reason, each Event as many times as it occurred (its series).
	EventsByReason map[string]int `json:"eventsByReason"`
	// RoundsPerPod are the home agent's placement rounds in the run per
	// pod (flotilla_placement_rounds_total), and RoundsByState the same by
	// the state of the source pod each round found; none for the
	// baseline.
	RoundsPerPod  float64            `json:"roundsPerPod,omitempty"`
	RoundsByState map[string]float64 `json:"roundsByState,omitempty"`
}

// withRounds runs a measured run and adds to it the home agent's
// placement rounds per pod, read from its metrics at addr before and
// after.
func withRounds(ctx context.Context, addr string, run func() (*Run, error)) (*Run, error) {
	before, beforeByState, err := placementRounds(ctx, addr)
	if err != nil {
		return nil, err
	}
	r, err := run()
	if err != nil || r.Pods == 0 {
		return r, err
	}
	after, afterByState, err := placementRounds(ctx, addr)
	if err != nil {
		return nil, err
	}
	r.RoundsPerPod, r.RoundsByState = roundsPer(after-before, beforeByState, afterByState, float64(r.Pods))
	return r, nil
}

// roundsPer divides the rounds between two readings by n, in all and by
// state (states with none left out).
func roundsPer(total float64, before, after map[string]float64, n float64) (float64, map[string]float64) {
	var byState map[string]float64
	for state, v := range after {
		if d := v - before[state]; d > 0 {
			if byState == nil {
				byState = map[string]float64{}
			}
			byState[state] = d / n
		}
	}
	return total / n, byState
}

// Percentiles of a latency, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

// Requests are API requests per pod served by one cluster's API server.
type Requests struct {
	All    float64 `json:"all"`
	Writes float64 `json:"writes"`
	// WritesByKind splits Writes by "resource[/subresource] VERB", e.g.
	// "pods/binding POST" or "events POST".
	WritesByKind map[string]float64 `json:"writesByKind,omitempty"`
}

// ProcessCost is the CPU one process used during the run and its peak RSS.
type ProcessCost struct {
	Name       string  `json:"name"`
	CPUSeconds float64 `json:"cpuSeconds"`
	PeakRSSMiB float64 `json:"peakRSSMiB"`
	// AnonMiB and FileMiB are its resident memory at the end of the run:
	// anonymous (the Go heap, stacks, the runtime's own) and mapped from
	// files (mostly its binary's pages, which the kernel can reclaim).
	AnonMiB float64 `json:"rssAnonMiB,omitempty"`
	FileMiB float64 `json:"rssFileMiB,omitempty"`
	// Exited: the process was gone at the end of the run (its CPU and
	// RSS unknown).
	Exited bool `json:"exited,omitempty"`
}

func createNamespace(ctx context.Context, c *sandbox.Cluster) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{protocol.NamespaceEnabledLabel: "true"}}}
	_, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cluster %s: creating namespace: %w", c.Name, err)
	}
	return nil
}

// podShape is how a run makes its pods.
type podShape struct {
	// optIn labels the pods for Flotilla.
	optIn bool
	// replicaSet, when set, makes the pods through a ReplicaSet of this
	// name with cfg.Pods replicas, one workload, instead of bare pods each
	// a workload of its own; a pod's creation is then when the informer
	// first sees it.
	replicaSet string
	// topologySpread gives the ReplicaSet's pods kube-scheduler's
	// topologySpreadConstraints by region then zone (maxSkew 1,
	// DoNotSchedule): the baseline's counterpart of a spread policy.
	topologySpread bool
}

// measure makes cfg.Pods pods in home and times them from their creation to
// bound and to Running, as seen by an informer in home; throughput counts
// from the first create call (of the pods, or of their ReplicaSet).
func measure(ctx context.Context, cfg config, all []*sandbox.Cluster, home *sandbox.Cluster, targets []*sandbox.Cluster, shape podShape, procs []process) (*Run, error) {
	clusters := append([]*sandbox.Cluster{home}, targets...)
	before := map[string]Requests{}
	for _, c := range clusters {
		r, err := scrapeRequests(ctx, c)
		if err != nil {
			return nil, err
		}
		before[c.Name] = r
	}
	cpuBefore := map[string]float64{}
	for _, p := range procs {
		cpuBefore[p.name], _ = readProc(p.pid)
	}
	cpuStart := machineCPU(all)

	var mu sync.Mutex
	created, bound, running := map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	client := home.Client()
	labels := map[string]string{"bench": "true"}
	if shape.replicaSet != "" {
		labels["app"] = shape.replicaSet
	}
	selector := metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	see := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, seen := created[pod.Name]; !seen && shape.replicaSet != "" {
			created[pod.Name] = now
		}
		if _, seen := bound[pod.Name]; !seen && pod.Spec.NodeName != "" {
			bound[pod.Name] = now
		}
		if _, seen := running[pod.Name]; !seen && pod.Status.Phase == corev1.PodRunning {
			running[pod.Name] = now
		}
	}
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }})
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	if shape.optIn {
		labels[protocol.ElectLabel] = "true"
	}
	cgBefore := cfg.budget.sample()
	start := time.Now()
	var createRetries atomic.Int64
	if shape.replicaSet != "" {
		rs := benchReplicaSet(shape, cfg, labels)
		if _, err := client.AppsV1().ReplicaSets(namespace).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating ReplicaSet %s: %w", rs.Name, err)
		}
	} else if err := createPods(ctx, cfg, home, home.Name, labels, &mu, created, &createRetries); err != nil {
		return nil, err
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(running) == cfg.Pods && len(bound) == cfg.Pods, nil
	})
	cgAfter, window := cfg.budget.sample(), time.Since(start)
	mu.Lock()
	nBound, nRunning := len(bound), len(running)
	mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("only %d bound and %d Running of %d pods after %s", nBound, nRunning, cfg.Pods, cfg.Timeout)
	}
	r := &Run{Pods: cfg.Pods, Requests: map[string]Requests{}, PodsByNode: map[string]int{}, CreateRetries: createRetries.Load()}
	for _, obj := range factory.Core().V1().Pods().Informer().GetStore().List() {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
			r.PodsByNode[pod.Spec.NodeName]++
		}
	}
	mu.Lock()
	lastBound, lastRunning := latest(bound), latest(running)
	r.BoundMillis = percentiles(created, bound)
	r.RunningMillis = percentiles(created, running)
	mu.Unlock()
	r.Seconds = lastRunning.Sub(start).Seconds()
	r.PodsPerSecondBound = float64(cfg.Pods) / lastBound.Sub(start).Seconds()
	r.PodsPerSecondRunning = float64(cfg.Pods) / lastRunning.Sub(start).Seconds()
	for _, c := range clusters {
		after, err := scrapeRequests(ctx, c)
		if err != nil {
			return nil, err
		}
		r.Requests[c.Name] = perPod(before[c.Name], after, float64(cfg.Pods))
	}
	// Read after the request counts, which it would add to.
	if r.EventsByReason, err = eventsByReason(ctx, home, factory.Core().V1().Pods().Informer().GetStore().ListKeys()); err != nil {
		return nil, err
	}
	for _, p := range procs {
		cpu, rss := readProc(p.pid)
		anon, file := residentNow(p.pid)
		r.Processes = append(r.Processes, ProcessCost{Name: p.name, CPUSeconds: cpu - cpuBefore[p.name], PeakRSSMiB: rss, AnonMiB: anon, FileMiB: file})
	}
	cpuEnd := machineCPU(all)
	r.MachineCPUSeconds = cpuEnd.total - cpuStart.total
	r.CPUByComponent = since(cpuEnd.byComponent, cpuStart.byComponent)
	r.CPUByCluster = map[string]float64{}
	for _, c := range clusters {
		r.CPUByCluster[c.Name] = cpuEnd.byCluster[c.Name] - cpuStart.byCluster[c.Name]
	}
	r.HomeCPUByComponent = since(cpuEnd.byClusterComponent[home.Name], cpuStart.byClusterComponent[home.Name])
	if cfg.budget != nil {
		var names []string
		for _, c := range clusters {
			names = append(names, c.Name)
		}
		r.Budget = budgetOf(cfg.budget.coresOf, cfg.budget.names(names), cgBefore, cgAfter, window.Seconds(), float64(cfg.Pods), func(name string) float64 { return r.CPUByCluster[name] })
	}
	return r, nil
}

// createPods creates cfg.Pods bare pods in home, named <prefix>-<i>, 16
// creators in parallel or at cfg.Rate, and records when each create call
// was made.
// createPods creates P pods from 16 creators (or at -rate). A create the
// API server fails for a reason other than the pod itself (its webhook
// timed out in a saturated cluster) is retried with a backoff, as a
// workload controller would; retries counts them.
func createPods(ctx context.Context, cfg config, home *sandbox.Cluster, prefix string, labels map[string]string, mu *sync.Mutex, created map[string]time.Time, retries *atomic.Int64) error {
	client := home.Client()
	names := make(chan string)
	errs := make(chan error, cfg.Pods)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for name := range names {
				pod := benchPod(name, labels, cfg.CPU)
				mu.Lock()
				created[name] = time.Now()
				mu.Unlock()
				backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 8, Cap: 5 * time.Second}
				err := retry.OnError(backoff, func(err error) bool {
					if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || ctx.Err() != nil {
						return false
					}
					retries.Add(1)
					return true
				}, func() error {
					_, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
					if apierrors.IsAlreadyExists(err) {
						return nil // an earlier try went through
					}
					return err
				})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	var tick *time.Ticker
	if cfg.Rate > 0 {
		tick = time.NewTicker(time.Duration(float64(time.Second) / cfg.Rate))
		defer tick.Stop()
	}
	for i := range cfg.Pods {
		if tick != nil {
			<-tick.C
		}
		names <- fmt.Sprintf("%s-%d", prefix, i)
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		return fmt.Errorf("creating pods: %w", err)
	}
	return nil
}

// eventsByReason counts the Events of the pods named by keys
// (namespace/name), each as often as it occurred.
func eventsByReason(ctx context.Context, home *sandbox.Cluster, keys []string) (map[string]int, error) {
	pods := make(map[string]bool, len(keys))
	for _, k := range keys {
		pods[strings.TrimPrefix(k, namespace+"/")] = true
	}
	list, err := home.Client().CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("cluster %s: listing events: %w", home.Name, err)
	}
	out := map[string]int{}
	for _, e := range list.Items {
		if e.InvolvedObject.Kind != "Pod" || !pods[e.InvolvedObject.Name] {
			continue
		}
		n := int(e.Count)
		if e.Series != nil {
			n = int(e.Series.Count)
		}
		out[e.Reason] += max(n, 1)
	}
	return out, nil
}

// cpuSample is the CPU seconds every process of the sandbox used so far, in
// all, by kind of process, by cluster, and by cluster and kind.
type cpuSample struct {
	total              float64
	byComponent        map[string]float64
	byCluster          map[string]float64
	byClusterComponent map[string]map[string]float64
}

func machineCPU(clusters []*sandbox.Cluster) cpuSample {
	s := cpuSample{byComponent: map[string]float64{}, byCluster: map[string]float64{}, byClusterComponent: map[string]map[string]float64{}}
	for _, c := range clusters {
		s.byClusterComponent[c.Name] = map[string]float64{}
		for comp, pid := range c.PIDs() {
			cpu, _ := readProc(pid)
			s.total += cpu
			s.byComponent[string(comp)] += cpu
			s.byCluster[c.Name] += cpu
			s.byClusterComponent[c.Name][string(comp)] += cpu
		}
	}
	return s
}

// idleCores measures, with -idle, home's CPU by kind of process over
// cfg.Idle with nothing to place, in cores. With profilePath set it also
// takes the agent's CPU profile of that window from pprofAddr.
func idleCores(ctx context.Context, cfg config, home *sandbox.Cluster, pprofAddr, profilePath string) (map[string]float64, error) {
	if cfg.Idle <= 0 {
		return nil, nil
	}
	seconds := int(cfg.Idle.Round(time.Second) / time.Second)
	if seconds < 1 {
		seconds = 1
	}
	fmt.Fprintf(os.Stderr, "bench: %s idle for %ds\n", home.Name, seconds)
	profiled := make(chan error, 1)
	if profilePath != "" {
		go func() {
			profiled <- saveProfile(ctx, pprofAddr, fmt.Sprintf("profile?seconds=%d", seconds), profilePath)
		}()
	} else {
		profiled <- nil
	}
	before, start := machineCPU([]*sandbox.Cluster{home}), time.Now()
	// The window is the measurement itself, not a wait for a condition.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Duration(seconds) * time.Second):
	}
	after, window := machineCPU([]*sandbox.Cluster{home}), time.Since(start).Seconds()
	if err := <-profiled; err != nil {
		return nil, err
	}
	cores := since(after.byClusterComponent[home.Name], before.byClusterComponent[home.Name])
	for comp := range cores {
		cores[comp] /= window
	}
	return cores, nil
}

// since returns end - start for every key of end.
func since(end, start map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(end))
	for k, v := range end {
		out[k] = v - start[k]
	}
	return out
}

func benchPod(name string, labels map[string]string, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:      "app",
			Image:     "registry.example/bench:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}}},
	}
}

func latest(m map[string]time.Time) time.Time {
	var t time.Time
	for _, v := range m {
		if v.After(t) {
			t = v
		}
	}
	return t
}

func percentiles(from, to map[string]time.Time) Percentiles {
	var ms []float64
	for name, end := range to {
		if begin, ok := from[name]; ok {
			ms = append(ms, float64(end.Sub(begin).Microseconds())/1000)
		}
	}
	if len(ms) == 0 {
		return Percentiles{}
	}
	sort.Float64s(ms)
	at := func(q float64) float64 { return ms[min(len(ms)-1, int(q*float64(len(ms))))] }
	return Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}

// scrapeRequests sums apiserver_request_total, all verbs and writes only.
func scrapeRequests(ctx context.Context, c *sandbox.Cluster) (Requests, error) {
	raw, err := c.Client().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return Requests{}, fmt.Errorf("cluster %s: reading /metrics: %w", c.Name, err)
	}
	r := Requests{WritesByKind: map[string]float64{}}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, v, ok := sample(line)
		if !ok || name != "apiserver_request_total" {
			continue
		}
		r.All += v
		verb := label(line, "verb")
		switch verb {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION":
			r.Writes += v
			kind := label(line, "resource")
			if sub := label(line, "subresource"); sub != "" {
				kind += "/" + sub
			}
			r.WritesByKind[kind+" "+verb] += v
		}
	}
	return r, sc.Err()
}

// perPod is what an API server served between two scrapes, per pod.
func perPod(before, after Requests, pods float64) Requests {
	r := Requests{
		All:          (after.All - before.All) / pods,
		Writes:       (after.Writes - before.Writes) / pods,
		WritesByKind: map[string]float64{},
	}
	for kind, n := range after.WritesByKind {
		if d := n - before.WritesByKind[kind]; d > 0 {
			r.WritesByKind[kind] = d / pods
		}
	}
	return r
}

// sample reads one labelled sample of the Prometheus text format,
// name{labels} value [timestamp]: its name, its labels as written, and its
// value; false for any other line.
func sample(line string) (name, labels string, value float64, ok bool) {
	name, rest, found := strings.Cut(line, "{")
	end := strings.LastIndexByte(rest, '}')
	if !found || end < 0 {
		return "", "", 0, false
	}
	fields := strings.Fields(rest[end+1:])
	if len(fields) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return name, rest[:end], v, err == nil
}

// label returns the value of one label of a Prometheus text-format line.
func label(line, name string) string {
	i := strings.Index(line, ","+name+`="`)
	if i < 0 {
		i = strings.Index(line, "{"+name+`="`)
	}
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+3:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// residentNow is a process's resident memory now, in MiB: anonymous and
// file-backed (RssAnon and RssFile of /proc/<pid>/status).
func residentNow(pid int) (anon, file float64) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil || pid == 0 {
		return 0, 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kib, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "RssAnon:":
			anon = kib / 1024
		case "RssFile:":
			file = kib / 1024
		}
	}
	return anon, file
}

// readProc returns a process's CPU seconds so far and its peak RSS in MiB.
func readProc(pid int) (float64, float64) {
	if pid == 0 {
		return 0, 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// Fields after the command name, which may contain spaces.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	const clockTicks = 100 // USER_HZ on Linux
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var rssKiB float64
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			rssKiB, _ = strconv.ParseFloat(strings.Fields(line)[1], 64)
		}
	}
	return (utime + stime) / clockTicks, rssKiB / 1024
}
