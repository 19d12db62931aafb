package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestMeshTotals(t *testing.T) {
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	clusters := map[string]meshTimes{
		"m1": {
			created: map[string]time.Time{"m1-0": at(0), "m1-1": at(10)},
			bound:   map[string]time.Time{"m1-0": at(1000), "m1-1": at(2010)},
			running: map[string]time.Time{"m1-0": at(1500), "m1-1": at(2500)},
		},
		"m2": {
			created: map[string]time.Time{"m2-0": at(0), "m2-1": at(0)},
			bound:   map[string]time.Time{"m2-0": at(3000), "m2-1": at(4000)},
			running: map[string]time.Time{"m2-0": at(3500), "m2-1": at(5000)},
		},
	}
	r := meshTotals(start, 4, clusters)
	// 4 pods to the last bound at 4 s, the last Running at 5 s.
	if r.Pods != 4 || r.PodsPerSecondBound != 1 || r.PodsPerSecondRunning != 0.8 || r.Seconds != 5 {
		t.Errorf("totals: %+v", r)
	}
	// Latencies over all four pods: 1000, 2000, 3000, 4000 ms to bound.
	if r.BoundMillis.P50 != 3000 || r.BoundMillis.P99 != 4000 {
		t.Errorf("bound latencies: %+v", r.BoundMillis)
	}
	if got := throughput(start, 2, clusters["m1"].bound); math.Abs(got-2/2.01) > 1e-9 {
		t.Errorf("m1 throughput to bound: %g", got)
	}
	if got := throughput(start, 2, nil); got != 0 {
		t.Errorf("throughput without times: %g", got)
	}
	// m2-1 deleted before it ran: 3 pods Running, the last at 3.5 s.
	delete(clusters["m2"].running, "m2-1")
	if r := meshTotals(start, 4, clusters); r.PodsPerSecondBound != 1 || math.Abs(r.PodsPerSecondRunning-3/3.5) > 1e-9 || r.Seconds != 3.5 {
		t.Errorf("totals with a pod lost: %+v", r)
	}
	if n := goneBefore(map[string]bool{"m2-1": true, "m1-0": true}, clusters["m2"].running); n != 2 {
		t.Errorf("gone before Running: %d, want 2", n)
	} else if n := goneBefore(map[string]bool{"m2-0": true}, clusters["m2"].running); n != 0 {
		t.Errorf("m2-0 ran before it was deleted: %d lost", n)
	}
	if empty := meshTotals(start, 4, nil); empty.PodsPerSecondBound != 0 || empty.Seconds != 0 {
		t.Errorf("totals without pods: %+v", empty)
	}
}

func TestMeshHeadline(t *testing.T) {
	f := &MeshRun{PodsPerSecondBound: 90, PodsPerSecondRunning: 60}
	alone := &MeshRun{PodsPerSecondBound: 180, PodsPerSecondRunning: 120}
	base := &Run{PodsPerSecondBound: 45, PodsPerSecondRunning: 0}
	h := meshHeadline(f, alone, base)
	if h.VsBaselineBound != 2 || h.VsBaselineRunning != 0 || h.VsAloneBound != 0.5 || h.VsAloneRunning != 0.5 || h.AloneVsBaselineBound != 4 {
		t.Errorf("headline: %+v", h)
	}
	// Three clusters of 12 s CPU for 1200 pods (30 ms a pod) against a
	// baseline of 10 ms a pod: 3 × 10 ÷ 30.
	f.Pods = 1200
	f.Budget = map[string]ClusterBudget{"m1": {CPUSeconds: 12}, "m2": {CPUSeconds: 12}, "m3": {CPUSeconds: 12}}
	base.Budget = map[string]ClusterBudget{"base": {CPUPerPodMillis: 10}}
	if h := meshHeadline(f, alone, base); math.Abs(h.CPUBound-1) > 1e-9 {
		t.Errorf("CPU bound: %g, want 1", h.CPUBound)
	}
	if h := meshHeadline(f, nil, nil); h != (MeshHeadline{}) {
		t.Errorf("headline without baselines: %+v", h)
	}
}

func TestMeshMarkdown(t *testing.T) {
	budget := func(perPod float64) map[string]ClusterBudget {
		return map[string]ClusterBudget{"m1": {CPUSeconds: perPod * 1200 / 1000, CPUPerPodMillis: perPod, QuotaUsed: 0.95, HitQuota: true, Saturated: true}}
	}
	r := &MeshReport{
		Config:   config{Mesh: 3, Nodes: 4, NodePods: 1000, Pods: 400, MeshSelf: true, Invite: true, CPUPerCluster: 0.45, CgroupVersion: "cgroup v1"},
		Baseline: &Run{Pods: 1200, PodsPerSecondBound: 50, PodsPerSecondRunning: 30, PodsByNode: map[string]int{"m1-n0": 600, "m2-n0": 600}, Budget: map[string]ClusterBudget{"base": {CPUPerPodMillis: 10}}},
		Alone: &MeshRun{Pods: 1200, PodsPerSecondBound: 150, PodsPerSecondRunning: 90, Budget: budget(10),
			Clusters: map[string]*MeshCluster{"m1": {PodsPerSecondBound: 50, PodsByNode: map[string]int{"m1-n0": 400}}}},
		Flotilla: &MeshRun{Pods: 1200, PodsPerSecondBound: 60, PodsPerSecondRunning: 45, Budget: budget(25),
			Lost: 3, Clusters: map[string]*MeshCluster{"m1": {PodsPerSecondBound: 20, Deleted: 7, Lost: 3, PodsByNode: map[string]int{"flotilla-m1": 140, "flotilla-m2": 130, "flotilla-m3": 130}, EventsByReason: map[string]int{"Scheduled": 1200, "TaintManagerEviction": 12}}}},
	}
	r.Ratios = meshHeadline(r.Flotilla, r.Alone, r.Baseline)
	out := r.Markdown()
	for _, want := range []string{
		"N=3 clusters × M=4 nodes of 1000 pods, P=400 pods each (1200 in all)",
		"each cluster also its own target (self)",
		"**Flotilla mesh ÷ one baseline cluster: 1.20× to bound, 1.50× to Running**",
		"÷ the 3 clusters alone: 0.40× to bound, 0.50× to Running",
		"| aggregate pods/s to bound | 60.0 | 150.0 | 50.0 | 0.40× | 1.20× |",
		"N×M = 12 nodes placing the mesh's 1200 pods",
		"| alone | m1 | 50.0 |",
		"| own nodes 400 |",
		"| m1 140, m2 130, m3 130 | 7 (3) |",
		"**3 of the Flotilla run's 1200 pods were deleted before they ran**",
		"| pods deleted before they ran | 3 | 0 | 0 |",
		"per pod of all clusters (with repeats): Scheduled 1.00, TaintManagerEviction 0.01.",
		"| baseline | base | 50.0 | 30.0 |",
		"| flotilla | m1 | 30.0 | 25.0 ms | 2.50× | 95 % |",
		"the budgets allow the mesh 0.40× the baseline",
		"| alone | m1 | 12.0 | 10.0 ms | 1.00× |",
	} {
		wantIn(t, "report", out, want)
	}

	// Skewed bursts that m1 cannot hold alone: no alone run, its cells 0
	// and its ratios "-".
	r.Config.MeshPods, r.Config.NodePods = []int{800, 400, 0}, 150
	r.Alone, r.AloneLeftOut = nil, r.Config.aloneLeftOut()
	r.Ratios = meshHeadline(r.Flotilla, r.Alone, r.Baseline)
	out = r.Markdown()
	for _, want := range []string{
		"N=3 clusters × M=4 nodes of 150 pods, bursts of m1 800, m2 400, m3 0 (1200 in all)",
		"The clusters alone were not run: m1's burst of 800 pods is more than its 4 nodes take (600).",
		"| aggregate pods/s to bound | 60.0 | 0.0 | 50.0 | - | 1.20× |",
		"| flotilla | m1 | 30.0 | 25.0 ms | 2.50× | 95 % |",
	} {
		wantIn(t, "skewed report", out, want)
	}
	if strings.Contains(out, "| alone |") || strings.Contains(out, "clusters alone: ") {
		t.Errorf("skewed report has rows of an alone run:\n%s", out)
	}
	if got := (config{Mesh: 3, Nodes: 4, NodePods: 1000, Pods: 400}).aloneLeftOut(); got != "" {
		t.Errorf("bursts of 400 on 4 nodes of 1000 pods: left out (%s)", got)
	}
	if got := r.Config.perCluster(); got != 400 {
		t.Errorf("perCluster of 800, 400, 0 = %g, want 400", got)
	}

	if got := oversubscribed(config{Mesh: 3, Targets: 10, CPUPerCluster: 0.45}, 2); got != "" {
		t.Errorf("a mesh of 3 at 0.45 cores on 2 cores: %s", got)
	}
	if got := oversubscribed(config{Mesh: 5, CPUPerCluster: 0.45}, 2); !strings.Contains(got, "5 clusters of the mesh have 2.25 cores") {
		t.Errorf("a mesh of 5 at 0.45 cores on 2 cores: %q", got)
	}
}

func TestKeyedTexts(t *testing.T) {
	if got := placedText(map[string]int{"flotilla-m2": 3, "n1": 2, "flotilla-m1": 1, "n2": 1}); got != "m1 1, m2 3, own nodes 3" {
		t.Errorf("placedText: %q", got)
	}
	r := &MeshRun{Pods: 4, Clusters: map[string]*MeshCluster{
		"m1": {EventsByReason: map[string]int{"Scheduled": 2, "FannedOut": 1}},
		"m2": {EventsByReason: map[string]int{"Scheduled": 2}},
	}}
	if got := eventsText(r); got != "FannedOut 0.25, Scheduled 1.00" {
		t.Errorf("eventsText: %q", got)
	}
	if got := eventsText(&MeshRun{Pods: 4}); got != "none" {
		t.Errorf("eventsText of no Events: %q", got)
	}
}
