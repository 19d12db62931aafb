package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// -profile-apiserver: the source API server's CPU profile of the Flotilla
// run, beside the agent's (-profile), to attribute the source cluster's CPU.
var (
	profileAPIServer  = flag.Bool("profile-apiserver", false, "Save a CPU profile of the source's kube-apiserver of the first -profile-apiserver-seconds of the Flotilla run, and of the baseline's of its run, into -out (…-src-apiserver-cpu.pprof, …-base-apiserver-cpu.pprof), fetched from its /debug/pprof/profile with the admin credentials. With -mesh: the first mesh cluster's, of the Flotilla run. With -gangs: of each size's runs.")
	podWatches        = flag.Bool("pod-watches", false, "After the Flotilla run, print what the source's and the baseline's API servers say of their pod watches: watch events of pods sent per pod (one per watcher), their average size, the pod watches open, the events the watch cache dispatched per pod.")
	profileAPISeconds = flag.Int("profile-apiserver-seconds", 20, "With -profile-apiserver: how long the profile lasts.")
	// sourceAPIServer is the source's admin configuration, set once the
	// sandbox is up.
	sourceAPIServer *rest.Config
)

// startAPIServerProfile starts the source API server's CPU profile with
// -profile-apiserver and returns what waits for it and saves it.
func startAPIServerProfile(ctx context.Context, cfg config) func() error {
	return startProfileOf(ctx, sourceAPIServer, apiProfilePath(cfg.profilePath("cpu"), "src"), "src")
}

// startBaseAPIServerProfile does the same for the baseline's API server
// during the baseline run, to compare the two.
func startBaseAPIServerProfile(ctx context.Context, cfg config) func() error {
	return startProfileOf(ctx, baseAPIServer, apiProfilePath(cfg.profilePath("cpu"), "base"), "base")
}

// apiProfilePath is where cluster's API server profile goes beside the
// agent's profile at agentPath.
func apiProfilePath(agentPath, cluster string) string {
	return strings.Replace(agentPath, "-agent-cpu", "-"+cluster+"-apiserver-cpu", 1)
}

// startProfileOf starts the CPU profile of the API server of rc, into
// path, with -profile-apiserver, and returns what waits for it.
func startProfileOf(ctx context.Context, rc *rest.Config, path, cluster string) func() error {
	if !*profileAPIServer || rc == nil {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- saveSecureProfile(ctx, rc, *profileAPISeconds, path) }()
	return func() error {
		if err := <-done; err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: %s API server profile written to %s\n", cluster, path)
		return nil
	}
}

// baseAPIServer is the baseline cluster's admin configuration.
var baseAPIServer *rest.Config

// watchFanOut prints, with -pod-watches, what the API servers' metrics say
// of their pod watches after the runs: how many watch events of pods
// each sent per pod (every watcher counts its own copy), their bytes, and
// the pod watches open. The source's pods exist only in the Flotilla run
// and the baseline's only in its run, so the counters since start are the
// runs'.
func watchFanOut(ctx context.Context, pods int) {
	if !*podWatches {
		return
	}
	for _, c := range []struct {
		name string
		cfg  *rest.Config
	}{{"src", sourceAPIServer}, {"base", baseAPIServer}} {
		if c.cfg == nil {
			continue
		}
		m, err := podWatchMetrics(ctx, c.cfg)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s API server metrics: %v\n", c.name, err)
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s API server: %.1f pod watch events sent per pod (%.0f bytes each on average), %.0f pod watches open, %.1f events of pods dispatched by the watch cache per pod\n",
			c.name, m["apiserver_watch_events_total"]/float64(pods), m["apiserver_watch_events_sizes_sum"]/max(m["apiserver_watch_events_total"], 1),
			m["apiserver_longrunning_requests"], m["apiserver_watch_cache_events_dispatched_total"]/float64(pods))
	}
}

// podWatchMetrics sums, per metric name, the samples of the pod resource.
func podWatchMetrics(ctx context.Context, rc *rest.Config) (map[string]float64, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		name, labels, v, ok := sample(line)
		if !ok || !strings.Contains(labels, `resource="pods"`) {
			continue
		}
		switch name {
		case "apiserver_longrunning_requests":
			if !strings.Contains(labels, `verb="WATCH"`) {
				continue
			}
		case "apiserver_watch_events_total", "apiserver_watch_events_sizes_sum", "apiserver_watch_cache_events_dispatched_total":
			if strings.Contains(labels, `group="`) && !strings.Contains(labels, `group=""`) {
				continue
			}
		default:
			continue
		}
		out[name] += v
	}
	return out, nil
}
