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
	// Spread (with -spread): Flotilla is the run under the spread policy,
	// and this holds the run without a policy.
	Spread *Spread `json:"spread,omitempty"`
}

// Markdown renders the report; every Flotilla figure is also given as a
// ratio to the baseline, the only comparison that holds on a shared machine.
func (r *Report) Markdown() string {
	var b strings.Builder
	f, base := r.Flotilla, r.Baseline
	cands := candidatesText(r.Config)
	memLimit := ""
	if r.Config.AgentMemLimit != "" {
		memLimit = ", agent GOMEMLIMIT=" + r.Config.AgentMemLimit
	}
	access := "admin kubeconfigs"
	if r.Config.Invite {
		access = "invited (ClusterSource per target)"
	}
	if r.Config.SourceOnly {
		access += ", src without a flotilla-scheduler"
	}
	budgetText := "uncapped (every process shares the machine)"
	if r.Config.CPUPerCluster > 0 {
		budgetText = fmt.Sprintf("%g cores per cluster (%s)", r.Config.CPUPerCluster, r.Config.CgroupVersion)
	}
	if r.Spread != nil {
		r.spreadMarkdown(&b)
	}
	fmt.Fprintf(&b, "### K=%d targets × M=%d nodes, P=%d pods, rate %s, candidates to %s%s, %s, CPU %s, %s\n\n", r.Config.Targets, r.Config.Nodes, r.Config.Pods, rateText(r.Config.Rate), cands, memLimit, access, budgetText, r.Date)
	fmt.Fprintln(&b, "| figure | flotilla | baseline (kube-scheduler, one cluster) | ratio |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	row := func(name string, fv, bv float64, unit string) {
		fmt.Fprintf(&b, "| %s | %.1f %s | %.1f %s | %s |\n", name, fv, unit, bv, unit, ratioText(fv, bv))
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
	var idleComps []string
	for comp := range f.IdleCores {
		idleComps = append(idleComps, comp)
	}
	for comp := range base.IdleCores {
		if _, both := f.IdleCores[comp]; !both {
			idleComps = append(idleComps, comp)
		}
	}
	sort.Strings(idleComps)
	for _, comp := range idleComps {
		fv, bv := f.IdleCores[comp], base.IdleCores[comp]
		fmt.Fprintf(&b, "| idle before the run: cores of %s | %.3f | %.3f | %s |\n", comp, fv, bv, ratioText(fv, bv))
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
	if f.CreateRetries > 0 {
		fmt.Fprintf(&b, "| pod creates retried (the API server failed them) | %d | | |\n", f.CreateRetries)
	}
	if f.AgentLiveHeapMiB > 0 {
		fmt.Fprintf(&b, "| agent: live heap after the run | %.1f MiB | | |\n", f.AgentLiveHeapMiB)
	}
	// What runs as pods on worker nodes in production: Flotilla's agents
	// and schedulers, against the baseline's kube-scheduler, which does
	// the work they share.
	var releaseCPU, schedulerCPU float64
	for _, p := range f.Processes {
		releaseCPU += p.CPUSeconds
	}
	for _, p := range base.Processes {
		schedulerCPU += p.CPUSeconds
	}
	row("CPU/pod of Flotilla's pods (every agent and Flotilla scheduler) / of kube-scheduler", 1000*releaseCPU/float64(f.Pods), 1000*schedulerCPU/float64(base.Pods), "ms")
	if f.RoundsPerPod > 0 {
		fmt.Fprintf(&b, "| agent: placement rounds per pod (by the pod's state: %s) | %.1f | | |\n", statesText(f.RoundsByState), f.RoundsPerPod)
	}
	for _, p := range f.Processes {
		fmt.Fprintf(&b, "| %s: CPU s, peak RSS | %.1f s, %.0f MiB | | |\n", p.Name, p.CPUSeconds, p.PeakRSSMiB)
	}
	for _, p := range f.Processes {
		if p.Name == "agent" && p.AnonMiB+p.FileMiB > 0 {
			fmt.Fprintf(&b, "| %s: resident at the end, anonymous / from files (its binary) | %.0f / %.0f MiB | | |\n", p.Name, p.AnonMiB, p.FileMiB)
		}
	}
	for _, p := range base.Processes {
		fmt.Fprintf(&b, "| baseline %s: CPU s, peak RSS | | %.1f s, %.0f MiB | |\n", p.Name, p.CPUSeconds, p.PeakRSSMiB)
	}
	r.budgetMarkdown(&b)
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

// ratioText is a ÷ b as "1.23×", "-" when b is 0.
func ratioText(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func rateText(rate float64) string {
	if rate <= 0 {
		return "burst"
	}
	return fmt.Sprintf("%g pods/s", rate)
}

// spreadMarkdown compares the Flotilla runs of one ReplicaSet under the
// spread policy (a) and without a policy (b), with the baseline's
// kube-scheduler spreading the same ReplicaSet by topologySpreadConstraints.
func (r *Report) spreadMarkdown(b *strings.Builder) {
	a, n, base := r.Flotilla, r.Spread.NoPolicy, r.Baseline
	order := "without a policy first, then under the policy"
	if r.Spread.PolicyFirst {
		order = "under the policy first, then without"
	}
	fmt.Fprintf(b, "### Spread policy (%s): K=%d targets × M=%d nodes, one ReplicaSet of P=%d, candidates to %s, %s, %s\n\n", r.Config.SpreadWhen, r.Config.Targets, r.Config.Nodes, r.Config.Pods, candidatesText(r.Config), order, r.Date)
	fmt.Fprintln(b, "| figure | (a) flotilla, spread policy | (b) flotilla, no policy | a ÷ b | baseline (kube-scheduler, topologySpreadConstraints) |")
	fmt.Fprintln(b, "|---|---|---|---|---|")
	row := func(name string, av, nv, bv float64, format string) {
		ratio := "-"
		if nv != 0 {
			ratio = fmt.Sprintf("%.2f", av/nv)
		}
		baseText := "-"
		if bv >= 0 {
			baseText = fmt.Sprintf(format, bv)
		}
		fmt.Fprintf(b, "| %s | "+format+" | "+format+" | %s | %s |\n", name, av, nv, ratio, baseText)
	}
	row("pods/s to bound", a.PodsPerSecondBound, n.PodsPerSecondBound, base.PodsPerSecondBound, "%.1f")
	row("pods/s to Running", a.PodsPerSecondRunning, n.PodsPerSecondRunning, base.PodsPerSecondRunning, "%.1f")
	row("p50 create→bound, ms", a.BoundMillis.P50, n.BoundMillis.P50, base.BoundMillis.P50, "%.0f")
	row("p99 create→bound, ms", a.BoundMillis.P99, n.BoundMillis.P99, base.BoundMillis.P99, "%.0f")
	row("p99 create→Running, ms", a.RunningMillis.P99, n.RunningMillis.P99, base.RunningMillis.P99, "%.0f")
	baseReq := base.Requests["base"]
	row("source writes/pod", a.Requests["src"].Writes, n.Requests["src"].Writes, baseReq.Writes, "%.2f")
	row("source writes/pod to objects (no Events, Leases)", objectWrites(a.Requests["src"]), objectWrites(n.Requests["src"]), objectWrites(baseReq), "%.2f")
	targetWrites := func(run *Run, objects bool) float64 {
		total := 0.0
		for name, req := range run.Requests {
			switch {
			case name == "src":
			case objects:
				total += objectWrites(req)
			default:
				total += req.Writes
			}
		}
		return total
	}
	row("all targets' writes/pod", targetWrites(a, false), targetWrites(n, false), -1, "%.2f")
	row("all targets' writes/pod to objects", targetWrites(a, true), targetWrites(n, true), -1, "%.2f")
	row("CPU of all sandbox processes, s", a.MachineCPUSeconds, n.MachineCPUSeconds, base.MachineCPUSeconds, "%.1f")
	row("cores busy during the run (of 2)", a.MachineCPUSeconds/a.Seconds, n.MachineCPUSeconds/n.Seconds, base.MachineCPUSeconds/base.Seconds, "%.2f")
	perPod := func(run *Run, cluster string) float64 { return 1000 * run.CPUByCluster[cluster] / float64(run.Pods) }
	row("CPU/pod of the source cluster, ms", perPod(a, "src"), perPod(n, "src"), perPod(base, "base"), "%.1f")
	agentCPU := func(run *Run) float64 {
		for _, p := range run.Processes {
			if p.Name == "agent" {
				return p.CPUSeconds
			}
		}
		return 0
	}
	row("source agent CPU, s", agentCPU(a), agentCPU(n), -1, "%.1f")
	reasons := map[string]bool{}
	for _, run := range []*Run{a, n, base} {
		for reason := range run.EventsByReason {
			reasons[reason] = true
		}
	}
	var sortedReasons []string
	for reason := range reasons {
		sortedReasons = append(sortedReasons, reason)
	}
	sort.Strings(sortedReasons)
	for _, reason := range sortedReasons {
		per := func(run *Run) float64 { return float64(run.EventsByReason[reason]) / float64(run.Pods) }
		row("Events `"+reason+"` per pod (with repeats)", per(a), per(n), per(base), "%.2f")
	}
	fmt.Fprintf(b, "| pods per zone | %s | %s | | %s |\n\n", zoneText(zoneCounts(a, r.Spread.Places)), zoneText(zoneCounts(n, r.Spread.Places)), zoneText(zoneCounts(base, r.Spread.Places)))

	fmt.Fprintln(b, "Writes per pod by kind, (a) under the policy and (b) without:")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| kind | source (a) | source (b) | all targets (a) | all targets (b) |")
	fmt.Fprintln(b, "|---|---|---|---|---|")
	byKind := func(run *Run, source bool) map[string]float64 {
		out := map[string]float64{}
		for name, req := range run.Requests {
			if (name == "src") == source {
				for k, v := range req.WritesByKind {
					out[k] += v
				}
			}
		}
		return out
	}
	as, ns, at, nt := byKind(a, true), byKind(n, true), byKind(a, false), byKind(n, false)
	kinds := map[string]bool{}
	for _, m := range []map[string]float64{as, ns, at, nt} {
		for k := range m {
			kinds[k] = true
		}
	}
	var sorted []string
	for k := range kinds {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		fmt.Fprintf(b, "| %s | %.2f | %.2f | %.2f | %.2f |\n", k, as[k], ns[k], at[k], nt[k])
	}
	fmt.Fprint(b, "\nThe run under the policy against the baseline:\n\n")
}

// candidatesText says how many targets get a candidate of each pod at first.
func candidatesText(c config) string {
	if c.MaxCandidates > 0 && c.MaxCandidates < c.Targets {
		return fmt.Sprintf("%d target(s)", c.MaxCandidates)
	}
	return "all targets"
}
