package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/flotilla-dev/flotilla/test/cgroup"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// hitQuotaFraction: a cluster throttled in at least this share of the CFS
// periods in which it had work hit its quota during the run.
const hitQuotaFraction = 0.10

// saturatedQuota: a cluster that used at least this share of its quota over
// the whole run was bounded by it. One that hit its quota using less did so
// in bursts: more than its quota's worth of work within some 100 ms
// periods, idle in others.
const saturatedQuota = 0.90

// The shapes of a budget (-shape): what of a cluster its quota holds.
const (
	// shapeAll: every process of the cluster, the kubelets (kwok) and the
	// release's pods too, as if the cluster were a machine of its own.
	shapeAll = "all"
	// shapeControlPlane: the control plane alone (etcd, kube-apiserver,
	// kube-controller-manager, the cluster's kube-scheduler), as in
	// production, where the release's pods and the kubelets run on worker
	// nodes. Those go into the cluster's uncapped workers group
	// (workersGroup), whose CPU is reported apart.
	shapeControlPlane = "control-plane"
)

// workersGroup names the uncapped group of a cluster's worker processes in
// the control-plane shape.
func workersGroup(cluster string) string { return cluster + "-workers" }

// budget is every cluster's CPU cgroup, with -cpu-per-cluster.
type budget struct {
	cores  float64
	shape  string
	h      *cgroup.Hierarchy
	groups map[string]*cgroup.Group
}

// newBudget makes a cgroup with a quota of cores CPUs for each cluster of
// opts and has the sandbox move every process of the cluster into it as it
// starts; in the control-plane shape only its control plane, and the rest
// into a group of its own without a quota. The bench itself, the load
// generator, stays where it is.
func newBudget(cores float64, shape string, opts *sandbox.Options) (*budget, error) {
	h, err := cgroup.Detect()
	if err != nil {
		return nil, fmt.Errorf("-cpu-per-cluster %g: %w; -cpu-per-cluster 0 runs without a CPU budget", cores, err)
	}
	b := &budget{cores: cores, shape: shape, h: h, groups: map[string]*cgroup.Group{}}
	for i := range opts.Clusters {
		spec := &opts.Clusters[i]
		g, err := h.New(spec.Name, cores)
		if err != nil {
			b.remove()
			return nil, fmt.Errorf("-cpu-per-cluster %g: %w", cores, err)
		}
		b.groups[spec.Name] = g
		if shape != shapeControlPlane {
			spec.OnProcessStart = func(_ string, pid int) error { return g.Add(pid) }
			continue
		}
		workers, err := h.New(workersGroup(spec.Name), 0)
		if err != nil {
			b.remove()
			return nil, fmt.Errorf("-shape %s: %w", shape, err)
		}
		b.groups[workers.Name] = workers
		spec.OnProcessStart = func(name string, pid int) error {
			if sandbox.ControlPlane(name) {
				return g.Add(pid)
			}
			return workers.Add(pid)
		}
	}
	what := "every process of it"
	if shape == shapeControlPlane {
		what = "its control plane; its workers (kwok, the release's pods) uncapped, in a group apart"
	}
	fmt.Fprintf(os.Stderr, "bench: every cluster in a cgroup of its own with %g cores, %s (%s, under %s)\n", cores, what, h.Version, h.CPU+"/"+cgroup.Parent)
	return b, nil
}

// coresOf is the quota of a group, 0 for none or one it does not hold.
func (b *budget) coresOf(group string) float64 {
	if g, ok := b.groups[group]; ok {
		return g.Cores
	}
	return 0
}

// names are the groups of clusters: each cluster's, and in the
// control-plane shape its workers' too.
func (b *budget) names(clusters []string) []string {
	if b.shape != shapeControlPlane {
		return clusters
	}
	var out []string
	for _, c := range clusters {
		out = append(out, c, workersGroup(c))
	}
	return out
}

// remove deletes the groups once the sandbox has stopped.
func (b *budget) remove() {
	if b == nil {
		return
	}
	for _, g := range b.groups {
		if err := g.Remove(5 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
	b.h.RemoveParent()
}

// sample reads every group's counters now.
func (b *budget) sample() map[string]cgroup.Stats {
	if b == nil {
		return nil
	}
	out := map[string]cgroup.Stats{}
	for name, g := range b.groups {
		s, err := g.Stats()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			continue
		}
		out[name] = s
	}
	return out
}

// ClusterBudget is what one capped cluster used during a run, from its
// cgroup, from the first create call to the last pod Running.
type ClusterBudget struct {
	// CPUSeconds is the cgroup's CPU time (cpuacct.usage, or cgroup v2's
	// usage_usec): every process of the cluster and its children.
	CPUSeconds      float64 `json:"cpuSeconds"`
	CPUPerPodMillis float64 `json:"cpuPerPodMillis"`
	// QuotaUsed is CPUSeconds ÷ (quota × the window's length).
	QuotaUsed float64 `json:"quotaUsed"`
	// Periods are the CFS periods (100 ms) in which the cluster had work;
	// ThrottledPeriods those in which it ran out of quota, and
	// ThrottledSeconds how long its threads waited for the next period in
	// all (summed over the CPUs it was throttled on).
	Periods           int64   `json:"periods"`
	ThrottledPeriods  int64   `json:"throttledPeriods"`
	ThrottledFraction float64 `json:"throttledFraction"`
	ThrottledSeconds  float64 `json:"throttledSeconds"`
	// HitQuota: throttled in at least 10 % of its periods.
	HitQuota bool `json:"hitQuota"`
	// Saturated: it used at least 90 % of its quota over the run.
	Saturated bool `json:"saturated"`
}

// budgetOf is what each of groups used between before and after, a
// window of seconds; cores gives a group's quota (0: none); cpuFallback
// gives a group's CPU from /proc when the cgroup has no usage counter
// (cgroup v1 without cpuacct).
func budgetOf(cores func(group string) float64, clusters []string, before, after map[string]cgroup.Stats, seconds, pods float64, cpuFallback func(string) float64) map[string]ClusterBudget {
	out := map[string]ClusterBudget{}
	for _, name := range clusters {
		a, ok1 := after[name]
		b, ok2 := before[name]
		if !ok1 || !ok2 {
			continue
		}
		d := a.Sub(b)
		cpu := d.UsageSeconds
		if cpu < 0 {
			cpu = cpuFallback(name)
		}
		cb := ClusterBudget{
			CPUSeconds:        cpu,
			CPUPerPodMillis:   1000 * cpu / pods,
			Periods:           d.Periods,
			ThrottledPeriods:  d.Throttled,
			ThrottledFraction: d.ThrottledFraction(),
			ThrottledSeconds:  d.ThrottledSeconds,
			HitQuota:          d.ThrottledFraction() >= hitQuotaFraction,
		}
		if q := cores(name); q > 0 && seconds > 0 {
			cb.QuotaUsed = cpu / (q * seconds)
		}
		cb.Saturated = cb.QuotaUsed >= saturatedQuota
		out[name] = cb
	}
	return out
}

// oversubscribed says whether the quotas of the clusters busy in the
// Flotilla run (the source and K targets; with -mesh, the N clusters of the
// mesh) add up to more than the machine's
// CPUs: the caps then no longer give each cluster its share.
func oversubscribed(cfg config, cpus int) string {
	if cfg.CPUPerCluster <= 0 {
		return ""
	}
	n, run := cfg.Targets+1, "Flotilla run"
	if cfg.Mesh > 0 {
		n, run = cfg.Mesh, "mesh"
	}
	busy := float64(n) * cfg.CPUPerCluster
	if busy > float64(cpus) {
		return fmt.Sprintf("the %d clusters of the %s have %.2f cores of quota in all, more than this machine's %d: a cluster may get less than its quota", n, run, busy, cpus)
	}
	return ""
}

// budgetHead opens the table of each capped cluster's CPU: what it counts
// (window says over which time and per which pods) and its header.
func budgetHead(b *strings.Builder, cfg config, window string) {
	what := "every cluster"
	if cfg.Shape == shapeControlPlane {
		what = "every cluster's control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)"
	}
	fmt.Fprintf(b, "\nCPU budget: %s in a cgroup of its own (%s) with %g cores, the load generator uncapped; each cluster's CPU from its cgroup, %s. It hit its quota when throttled in ≥ %.0f %% of the 100 ms periods in which it had work: throughout (saturated) when it used ≥ %.0f %% of its quota over the run, else in bursts.\n\n",
		what, cfg.CgroupVersion, cfg.CPUPerCluster, window, 100*hitQuotaFraction, 100*saturatedQuota)
	if cfg.Shape == shapeControlPlane {
		fmt.Fprintln(b, "What runs on a production cluster's worker nodes (kwok for the kubelets; the agents and Flotilla's schedulers) is in an uncapped group per cluster, `<cluster>-workers`, compared with the baseline's `base-workers` (its kwok).")
		fmt.Fprintln(b)
	}
	if cfg.Oversubscribed != "" {
		fmt.Fprintf(b, "**Warning:** %s.\n\n", cfg.Oversubscribed)
	}
	fmt.Fprintln(b, "| run | cluster | CPU s | CPU/pod | × baseline | quota used | throttled periods | throttled time | hit its quota |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|---|---|")
}

// budgetMarkdown is the table of each capped cluster's CPU in both runs.
func (r *Report) budgetMarkdown(b *strings.Builder) {
	f, base := r.Flotilla, r.Baseline
	if f == nil || base == nil || len(f.Budget) == 0 || len(base.Budget) == 0 {
		return
	}
	budgetHead(b, r.Config, "from the first create to the last pod Running")
	// A workers group is set against the baseline's workers, a cluster
	// against the baseline cluster.
	line := func(run, name string, c ClusterBudget) {
		against := "base"
		if strings.HasSuffix(name, workersGroup("")) {
			against = workersGroup("base")
		}
		budgetLine(b, run, name, c, base.Budget[against].CPUPerPodMillis)
	}
	for _, n := range []string{"base", workersGroup("base")} {
		if c, ok := base.Budget[n]; ok {
			line("baseline", n, c)
		}
	}
	// The source first, then the targets.
	var names []string
	for n := range f.Budget {
		if n != "src" && n != workersGroup("src") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range append([]string{"src", workersGroup("src")}, names...) {
		if c, ok := f.Budget[n]; ok {
			line("flotilla", n, c)
		}
	}
}

// budgetLine is one row of a budget table: what cluster name used in run,
// its CPU per pod against baseline's (ms; 0: no ratio).
func budgetLine(b *strings.Builder, run, name string, c ClusterBudget, baseline float64) {
	ratio := ratioText(c.CPUPerPodMillis, max(baseline, 0))
	hit := "no"
	switch {
	case c.HitQuota && c.Saturated:
		hit = "**yes, saturated**"
	case c.HitQuota:
		hit = "yes, in bursts"
	case c.Saturated:
		hit = "no, saturated"
	}
	fmt.Fprintf(b, "| %s | %s | %.1f | %.1f ms | %s | %.0f %% | %d of %d (%.0f %%) | %.1f s | %s |\n",
		run, name, c.CPUSeconds, c.CPUPerPodMillis, ratio, 100*c.QuotaUsed, c.ThrottledPeriods, c.Periods, 100*c.ThrottledFraction, c.ThrottledSeconds, hit)
}
