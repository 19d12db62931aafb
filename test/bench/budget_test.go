package main

import (
	"math"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/test/cgroup"
)

func TestBudgetOf(t *testing.T) {
	before := map[string]cgroup.Stats{
		"src": {UsageSeconds: 10, Periods: 100, Throttled: 10, ThrottledSeconds: 1},
		"t1":  {UsageSeconds: -1, Periods: 100},
	}
	after := map[string]cgroup.Stats{
		"src": {UsageSeconds: 14.5, Periods: 200, Throttled: 90, ThrottledSeconds: 6},
		"t1":  {UsageSeconds: -1, Periods: 150, Throttled: 2},
	}
	got := budgetOf(func(string) float64 { return 0.45 }, []string{"src", "t1", "gone"}, before, after, 10, 400, func(name string) float64 {
		if name != "t1" {
			t.Errorf("fallback asked for %s, which has a usage counter", name)
		}
		return 0.9
	})
	src := got["src"]
	if src.CPUSeconds != 4.5 || src.CPUPerPodMillis != 11.25 || src.Periods != 100 || src.ThrottledPeriods != 80 || !src.HitQuota || !src.Saturated || math.Abs(src.QuotaUsed-1) > 1e-9 || src.ThrottledSeconds != 5 {
		t.Errorf("src: %+v", src)
	}
	t1 := got["t1"]
	if t1.CPUSeconds != 0.9 || t1.HitQuota || t1.Saturated || t1.ThrottledFraction != 0.04 {
		t.Errorf("t1: %+v", t1)
	}
	if _, ok := got["gone"]; ok {
		t.Error("a cluster without samples got a budget")
	}
}

func TestBudgetMarkdown(t *testing.T) {
	r := &Report{
		Config:   config{Targets: 1, CPUPerCluster: 0.45, CgroupVersion: "cgroup v1"},
		Baseline: &Run{Budget: map[string]ClusterBudget{"base": {CPUPerPodMillis: 10}}},
		Flotilla: &Run{Budget: map[string]ClusterBudget{"src": {CPUPerPodMillis: 15, HitQuota: true, Saturated: true, Periods: 10, ThrottledPeriods: 9, ThrottledFraction: 0.9}, "t1": {CPUPerPodMillis: 5, HitQuota: true, QuotaUsed: 0.5}}},
	}
	var b strings.Builder
	r.budgetMarkdown(&b)
	out := b.String()
	for _, want := range []string{"a cgroup of its own (cgroup v1) with 0.45 cores", "| flotilla | src | 0.0 | 15.0 ms | 1.50× |", "9 of 10 (90 %) | 0.0 s | **yes, saturated** |", "| flotilla | t1 | 0.0 | 5.0 ms | 0.50× | 50 % |", "yes, in bursts |"} {
		wantIn(t, "report", out, want)
	}
	if oversubscribed(config{Targets: 10, CPUPerCluster: 0.45}, 2) == "" {
		t.Error("11 clusters at 0.45 cores fit on 2 cores?")
	}
	if got := oversubscribed(config{Targets: 3, CPUPerCluster: 0.45}, 2); got != "" {
		t.Errorf("4 clusters at 0.45 cores on 2 cores: %s", got)
	}
}

// wantIn fails t when out lacks want.
func wantIn(t *testing.T, what, out, want string) {
	t.Helper()
	if !strings.Contains(out, want) {
		t.Errorf("%s lacks %q:\n%s", what, want, out)
	}
}

func TestBudgetMarkdownControlPlane(t *testing.T) {
	r := &Report{
		Config: config{Targets: 1, CPUPerCluster: 0.45, CgroupVersion: "cgroup v1", Shape: shapeControlPlane},
		Baseline: &Run{Budget: map[string]ClusterBudget{
			"base": {CPUPerPodMillis: 10}, "base-workers": {CPUPerPodMillis: 2},
		}},
		Flotilla: &Run{Budget: map[string]ClusterBudget{
			"src": {CPUPerPodMillis: 15}, "src-workers": {CPUPerPodMillis: 6},
			"t1": {CPUPerPodMillis: 5}, "t1-workers": {CPUPerPodMillis: 3},
		}},
	}
	var b strings.Builder
	r.budgetMarkdown(&b)
	out := b.String()
	// Each workers group against the baseline's workers, each cluster
	// against the baseline cluster; the source before the targets.
	for _, want := range []string{
		"every cluster's control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) in a cgroup",
		"| baseline | base-workers | 0.0 | 2.0 ms |",
		"| flotilla | src | 0.0 | 15.0 ms | 1.50× |",
		"| flotilla | src-workers | 0.0 | 6.0 ms | 3.00× |",
		"| flotilla | t1-workers | 0.0 | 3.0 ms | 1.50× |",
	} {
		wantIn(t, "report", out, want)
	}
	if strings.Index(out, "| flotilla | src-workers") > strings.Index(out, "| flotilla | t1 |") {
		t.Errorf("the source's rows should come before the targets':\n%s", out)
	}
}

func TestParseShape(t *testing.T) {
	for _, tc := range []struct {
		raw   string
		takes int
		want  string
	}{
		{"", shapesBurst, "all,control-plane"},
		{"both", shapesBurst, "all,control-plane"},
		{"control-plane", shapesBurst, "control-plane"},
		{"all", shapesBurst, "all"},
		{"", shapesOne, "all"},
		{"all", shapesOne, "all"},
		{"control-plane", shapesOne, "control-plane"},
		{"both", shapesOne, "error"},
		{"", shapesAllOnly, "all"},
		{"all", shapesAllOnly, "all"},
		{"control-plane", shapesAllOnly, "error"},
		{"both", shapesAllOnly, "error"},
		{"workers", shapesBurst, "error"},
		{"workers", shapesOne, "error"},
	} {
		got, err := parseShape(tc.raw, tc.takes)
		s := strings.Join(got, ",")
		if err != nil {
			s = "error"
		}
		if s != tc.want {
			t.Errorf("parseShape(%q, takes %d) = %s (%v), want %s", tc.raw, tc.takes, s, err, tc.want)
		}
	}
}
