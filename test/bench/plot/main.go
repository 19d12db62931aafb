// Command plot turns the JSON results of test/bench into PNG charts of how
// Flotilla's figures grow with the number of targets, one line per pod
// count, each figure as a ratio to the baseline of its own run where one
// exists.
//
//	go run ./test/bench/plot -in bench-results -out docs/img
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// result mirrors the parts of test/bench's Report that are plotted.
type result struct {
	Config struct {
		Targets       int `json:"targets"`
		Pods          int `json:"pods"`
		MaxCandidates int `json:"maxCandidates"`
		// CPUPerCluster > 0: a run under CPU cgroups, not part of the
		// (uncapped) sweep.
		CPUPerCluster float64 `json:"cpuPerCluster"`
	} `json:"config"`
	Flotilla *run `json:"flotilla"`
	Baseline *run `json:"baseline"`
}

type run struct {
	Seconds            float64 `json:"seconds"`
	MachineCPUSeconds  float64 `json:"machineCPUSeconds"`
	PodsPerSecondBound float64 `json:"podsPerSecondBound"`
	BoundMillis        struct {
		P50 float64 `json:"p50"`
		P99 float64 `json:"p99"`
	} `json:"boundMillis"`
	Requests map[string]struct {
		All          float64            `json:"all"`
		Writes       float64            `json:"writes"`
		WritesByKind map[string]float64 `json:"writesByKind"`
	} `json:"requestsPerPod"`
	Processes []struct {
		Name       string  `json:"name"`
		CPUSeconds float64 `json:"cpuSeconds"`
		PeakRSSMiB float64 `json:"peakRSSMiB"`
	} `json:"processes"`
}

func (r *run) process(name string) (cpu, rss float64) {
	for _, p := range r.Processes {
		if p.Name == name {
			return p.CPUSeconds, p.PeakRSSMiB
		}
	}
	return 0, 0
}

// writes sums the writes per pod of the source or of all targets, and of
// them the Events.
func (r *run) writes(source bool) (total, events float64) {
	for name, q := range r.Requests {
		if (name == "src") == source {
			total += q.Writes
			events += q.WritesByKind["events POST"] + q.WritesByKind["events PATCH"]
		}
	}
	return total, events
}

type figure struct {
	file, title, y string
	value          func(r result) float64
}

var figures = []figure{
	{"throughput.png", "pods/s to bound, ratio to kube-scheduler in one cluster", "ratio", func(r result) float64 {
		return r.Flotilla.PodsPerSecondBound / r.Baseline.PodsPerSecondBound
	}},
	{"p99.png", "p99 creation to bound", "seconds", func(r result) float64 { return r.Flotilla.BoundMillis.P99 / 1000 }},
	{"writes.png", "API writes per pod, source and all targets", "writes", func(r result) float64 {
		total := 0.0
		for _, q := range r.Flotilla.Requests {
			total += q.Writes
		}
		return total
	}},
	{"agent-rss.png", "agent peak RSS", "MiB", func(r result) float64 {
		for _, p := range r.Flotilla.Processes {
			if p.Name == "agent" {
				return p.PeakRSSMiB
			}
		}
		return 0
	}},
}

func main() {
	in := flag.String("in", "bench-results", "Folder of JSON results.")
	out := flag.String("out", "docs/img", "Folder for the PNGs.")
	flag.Parse()
	results, err := load(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
	for _, f := range figures {
		if err := draw(f, results, filepath.Join(*out, f.file)); err != nil {
			fmt.Fprintln(os.Stderr, "plot:", err)
			os.Exit(1)
		}
	}
	fmt.Fprintf(os.Stderr, "plotted %d results into %s\n", len(results), *out)
	fmt.Print(table(results))
}

// table renders every result as one Markdown row, sorted by fan-out, P, K.
func table(results []result) string {
	sort.Slice(results, func(i, j int) bool {
		a, b := results[i].Config, results[j].Config
		if a.MaxCandidates != b.MaxCandidates {
			return a.MaxCandidates > b.MaxCandidates
		}
		if a.Pods != b.Pods {
			return a.Pods < b.Pods
		}
		return a.Targets < b.Targets
	})
	var b strings.Builder
	b.WriteString("| K | P | candidates to | pods/s to bound (× baseline) | p50 / p99 create→bound, s (baseline p99) | writes/pod source, all targets (of which Events) | agent CPU s, peak RSS MiB | cores busy |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		f, base := r.Flotilla, r.Baseline
		cands := "all"
		if r.Config.MaxCandidates > 0 {
			cands = fmt.Sprint(r.Config.MaxCandidates)
		}
		cpu, rss := f.process("agent")
		srcWrites, srcEvents := f.writes(true)
		tgtWrites, tgtEvents := f.writes(false)
		fmt.Fprintf(&b, "| %d | %d | %s | %.1f (%.2f×) | %.1f / %.1f (%.2f) | %.1f (%.1f), %.1f (%.1f) | %.1f, %.0f | %.1f |\n",
			r.Config.Targets, r.Config.Pods, cands,
			f.PodsPerSecondBound, f.PodsPerSecondBound/base.PodsPerSecondBound,
			f.BoundMillis.P50/1000, f.BoundMillis.P99/1000, base.BoundMillis.P99/1000,
			srcWrites, srcEvents, tgtWrites, tgtEvents, cpu, rss, f.MachineCPUSeconds/f.Seconds)
	}
	return b.String()
}

func load(dir string) ([]result, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no results in %s", dir)
	}
	var out []result
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r result
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if r.Flotilla != nil && r.Baseline != nil && r.Config.CPUPerCluster == 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// draw plots one figure against K, one line per (P, max-candidates).
func draw(f figure, results []result, path string) error {
	p := plot.New()
	p.Title.Text = f.title
	p.X.Label.Text = "targets (K)"
	p.Y.Label.Text = f.y
	type key struct{ pods, cands int }
	series := map[key]plotter.XYs{}
	for _, r := range results {
		k := key{r.Config.Pods, r.Config.MaxCandidates}
		series[k] = append(series[k], plotter.XY{X: float64(r.Config.Targets), Y: f.value(r)})
	}
	keys := make([]key, 0, len(series))
	for k := range series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pods != keys[j].pods {
			return keys[i].pods < keys[j].pods
		}
		return keys[i].cands < keys[j].cands
	})
	var lines []any
	for _, k := range keys {
		xys := series[k]
		sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
		label := fmt.Sprintf("P=%d, candidates to all", k.pods)
		if k.cands > 0 {
			label = fmt.Sprintf("P=%d, candidates to %d", k.pods, k.cands)
		}
		lines = append(lines, label, xys)
	}
	p.Y.Min = 0
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}
