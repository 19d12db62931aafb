package main

import (
	"fmt"
	"sort"
	"strings"
)

// Report is one benchmark run: Flotilla and the baseline, same machine, same
// moment.
type Report struct {
	Config   config `json:"config"`
	Date     string `json:"date"`
	Flotilla *Run   `json:"flotilla"`
	Baseline *Run   `json:"baseline"`
}

// Markdown renders the report; every Flotilla figure is also given as a
// ratio to the baseline, the only comparison that holds on a shared machine.
func (r *Report) Markdown() string {
	var b strings.Builder
	f, base := r.Flotilla, r.Baseline
	cands := "all targets"
	if r.Config.MaxCandidates > 0 && r.Config.MaxCandidates < r.Config.Targets {
		cands = fmt.Sprintf("%d target(s)", r.Config.MaxCandidates)
	}
	memLimit := ""
	if r.Config.AgentMemLimit != "" {
		memLimit = ", agent GOMEMLIMIT=" + r.Config.AgentMemLimit
	}
	access := "admin kubeconfigs"
	if r.Config.Invite {
		access = "invited (ClusterSource per target)"
	}
	fmt.Fprintf(&b, "### K=%d targets × M=%d nodes, P=%d pods, rate %s, candidates to %s%s, %s, %s\n\n", r.Config.Targets, r.Config.Nodes, r.Config.Pods, rateText(r.Config.Rate), cands, memLimit, access, r.Date)
	fmt.Fprintln(&b, "| figure | flotilla | baseline (kube-scheduler, one cluster) | ratio |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	row := func(name string, fv, bv float64, unit string) {
		ratio := "-"
		if bv != 0 {
			ratio = fmt.Sprintf("%.2f×", fv/bv)
		}
		fmt.Fprintf(&b, "| %s | %.1f %s | %.1f %s | %s |\n", name, fv, unit, bv, unit, ratio)
	}
	row("pods/s to bound", f.PodsPerSecondBound, base.PodsPerSecondBound, "")
	row("pods/s to Running", f.PodsPerSecondRunning, base.PodsPerSecondRunning, "")
	row("p50 create→bound", f.BoundMillis.P50, base.BoundMillis.P50, "ms")
	row("p90 create→bound", f.BoundMillis.P90, base.BoundMillis.P90, "ms")
	row("p99 create→bound", f.BoundMillis.P99, base.BoundMillis.P99, "ms")
	row("p99 create→Running", f.RunningMillis.P99, base.RunningMillis.P99, "ms")
	baseReq := base.Requests["base"]
	row("source API requests/pod", f.Requests["src"].All, baseReq.All, "")
	row("source API writes/pod", f.Requests["src"].Writes, baseReq.Writes, "")
	var targetAll, targetWrites float64
	var names []string
	for name, req := range f.Requests {
		if name != "src" {
			targetAll += req.All
			targetWrites += req.Writes
			names = append(names, name)
		}
	}
	row("source writes/pod to objects (no Events, Leases)", objectWrites(f.Requests["src"]), objectWrites(baseReq), "")
	row("all targets' API requests/pod", targetAll, 0, "")
	row("all targets' API writes/pod", targetWrites, 0, "")
	var targetObjectWrites float64
	for _, n := range names {
		targetObjectWrites += objectWrites(f.Requests[n])
	}
	row("all targets' writes/pod to objects (no Events, Leases)", targetObjectWrites, 0, "")
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "| %s API requests/pod (writes) | %.1f (%.1f) | | |\n", n, f.Requests[n].All, f.Requests[n].Writes)
	}
	row("CPU of all sandbox processes", f.MachineCPUSeconds, base.MachineCPUSeconds, "s")
	row("cores busy during the run (of 2)", f.MachineCPUSeconds/f.Seconds, base.MachineCPUSeconds/base.Seconds, "")
	var comps []string
	for comp := range f.CPUByComponent {
		comps = append(comps, comp)
	}
	sort.Strings(comps)
	for _, comp := range comps {
		row("CPU of every "+comp, f.CPUByComponent[comp], base.CPUByComponent[comp], "s")
	}
	// Per cluster, per pod: in production each cluster has its own control
	// plane and cores, and the busiest one bounds the throughput.
	perPod := func(run *Run, cluster string) float64 { return 1000 * run.CPUByCluster[cluster] / float64(run.Pods) }
	row("CPU/pod of the source cluster (control plane, kwok, scheduler, agent)", perPod(f, "src"), perPod(base, "base"), "ms")
	var homeComps []string
	for comp := range f.HomeCPUByComponent {
		homeComps = append(homeComps, comp)
	}
	sort.Strings(homeComps)
	for _, comp := range homeComps {
		fv, bv := 1000*f.HomeCPUByComponent[comp]/float64(f.Pods), 1000*base.HomeCPUByComponent[comp]/float64(base.Pods)
		row("  of which "+comp, fv, bv, "ms")
	}
	busiest := ""
	for _, n := range names {
		if busiest == "" || f.CPUByCluster[n] > f.CPUByCluster[busiest] {
			busiest = n
		}
	}
	if busiest != "" {
		row("CPU/pod of the busiest target ("+busiest+")", perPod(f, busiest), perPod(base, "base"), "ms")
	}
	if f.AgentLiveHeapMiB > 0 {
		fmt.Fprintf(&b, "| agent: live heap after the run | %.1f MiB | | |\n", f.AgentLiveHeapMiB)
	}
	for _, p := range f.Processes {
		fmt.Fprintf(&b, "| %s: CPU s, peak RSS | %.1f s, %.0f MiB | | |\n", p.Name, p.CPUSeconds, p.PeakRSSMiB)
	}
	for _, p := range base.Processes {
		fmt.Fprintf(&b, "| baseline %s: CPU s, peak RSS | | %.1f s, %.0f MiB | |\n", p.Name, p.CPUSeconds, p.PeakRSSMiB)
	}
	fmt.Fprint(&b, "\nWrites per pod by kind (resource[/subresource] verb):\n\n")
	fmt.Fprintln(&b, "| kind | flotilla source | flotilla all targets | baseline |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	kinds := map[string]bool{}
	targetKinds := map[string]float64{}
	for name, req := range f.Requests {
		for k, v := range req.WritesByKind {
			kinds[k] = true
			if name != "src" {
				targetKinds[k] += v
			}
		}
	}
	for k := range baseReq.WritesByKind {
		kinds[k] = true
	}
	var sorted []string
	for k := range kinds {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f |\n", k, f.Requests["src"].WritesByKind[k], targetKinds[k], baseReq.WritesByKind[k])
	}
	return b.String()
}

// objectWrites are the writes other than Events and Leases: what placing
// the pods wrote, without the record of it and the heartbeats.
func objectWrites(r Requests) float64 {
	total := r.Writes
	for kind, n := range r.WritesByKind {
		if strings.HasPrefix(kind, "events ") || strings.HasPrefix(kind, "leases ") {
			total -= n
		}
	}
	return total
}

func rateText(rate float64) string {
	if rate <= 0 {
		return "burst"
	}
	return fmt.Sprintf("%g pods/s", rate)
}
