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

// budget is every cluster's CPU cgroup, with -cpu-per-cluster.
type budget struct {
	cores  float64
	h      *cgroup.Hierarchy
	groups map[string]*cgroup.Group
}

// newBudget makes a cgroup with a quota of cores CPUs for each cluster of
// opts and has the sandbox move every process of the cluster into it as it
// starts. The bench itself, the load generator, stays where it is.
func newBudget(cores float64, opts *sandbox.Options) (*budget, error) {
	h, err := cgroup.Detect()
	if err != nil {
		return nil, fmt.Errorf("-cpu-per-cluster %g: %w; -cpu-per-cluster 0 runs without a CPU budget", cores, err)
	}
	b := &budget{cores: cores, h: h, groups: map[string]*cgroup.Group{}}
	for i := range opts.Clusters {
		spec := &opts.Clusters[i]
		g, err := h.New(spec.Name, cores)
		if err != nil {
			b.remove()
			return nil, fmt.Errorf("-cpu-per-cluster %g: %w", cores, err)
		}
		b.groups[spec.Name] = g
		spec.OnProcessStart = g.Add
	}
	fmt.Fprintf(os.Stderr, "bench: every cluster in a cgroup of its own with %g cores (%s, under %s)\n", cores, h.Version, h.CPU+"/"+cgroup.Parent)
	return b, nil
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

// budgetOf is what each of clusters used between before and after, a
// window of seconds; cpuFallback gives a cluster's CPU from /proc when the
// cgroup has no usage counter (cgroup v1 without cpuacct).
func budgetOf(cores float64, clusters []string, before, after map[string]cgroup.Stats, seconds, pods float64, cpuFallback func(string) float64) map[string]ClusterBudget {
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
		if cores > 0 && seconds > 0 {
			cb.QuotaUsed = cpu / (cores * seconds)
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
	fmt.Fprintf(b, "\nCPU budget: every cluster in a cgroup of its own (%s) with %g cores, the load generator uncapped; each cluster's CPU from its cgroup, %s. It hit its quota when throttled in ≥ %.0f %% of the 100 ms periods in which it had work: throughout (saturated) when it used ≥ %.0f %% of its quota over the run, else in bursts.\n\n",
		cfg.CgroupVersion, cfg.CPUPerCluster, window, 100*hitQuotaFraction, 100*saturatedQuota)
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
	baseline := base.Budget["base"].CPUPerPodMillis
	line := func(run, name string, c ClusterBudget) { budgetLine(b, run, name, c, baseline) }
	line("baseline", "base", base.Budget["base"])
	var names []string
	for n := range f.Budget {
		if n != "src" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	line("flotilla", "src", f.Budget["src"])
	for _, n := range names {
		line("flotilla", n, f.Budget[n])
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
