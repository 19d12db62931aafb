package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// With -profile, the first target's Flotilla scheduler and agent are
// profiled beside the source's agent over the same first -profile-seconds
// of the Flotilla run: between them the targets' releases spend about half
// of what Flotilla's pods spend per placed pod.
type profiledTarget struct {
	name string
	// scheduler reaches the scheduler's secure port (its /debug/pprof,
	// behind the cluster's delegated authentication and authorization).
	scheduler *rest.Config
	// agentPprof is the address of the target agent's pprof server; empty
	// when the target runs no agent (-invite=false).
	agentPprof string
}

// targetAgentRelease is the release of the first target's agent: its pprof
// server with -profile.
func targetAgentRelease(cfg config) (opts sandbox.ReleaseOptions, pprofAddr string, err error) {
	pprofAddr, err = servePprof(cfg, &opts)
	return opts, pprofAddr, err
}

// servePprof has the agent of opts serve its pprof on a free port with
// -profile, and returns the address ("" without).
func servePprof(cfg config, opts *sandbox.ReleaseOptions) (string, error) {
	if !cfg.Profile {
		return "", nil
	}
	ports, err := sandbox.FreePorts(1)
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	opts.AgentArgs = append(opts.AgentArgs, "--pprof-bind-address="+addr)
	return addr, nil
}

// profilePath is where the profile of the target's component goes, beside
// the source agent's at agentPath.
func (t profiledTarget) profilePath(agentPath, component string) string {
	return strings.Replace(agentPath, "-agent-cpu", "-"+t.name+"-"+component+"-cpu", 1)
}

// start starts the CPU profiles of the target's scheduler and agent for
// seconds, beside the source agent's at agentPath, and returns what waits
// for them and says where they went. A zero target profiles nothing.
func (t profiledTarget) start(ctx context.Context, seconds int, agentPath string) func() error {
	if t.name == "" {
		return func() error { return nil }
	}
	type result struct {
		path string
		err  error
	}
	var waits []chan result
	if t.scheduler != nil {
		done := make(chan result, 1)
		path := t.profilePath(agentPath, "scheduler")
		go func() { done <- result{path, saveSecureProfile(ctx, t.scheduler, seconds, path)} }()
		waits = append(waits, done)
	}
	if t.agentPprof != "" {
		done := make(chan result, 1)
		path := t.profilePath(agentPath, "agent")
		go func() {
			done <- result{path, saveProfile(ctx, t.agentPprof, fmt.Sprintf("profile?seconds=%d", seconds), path)}
		}()
		waits = append(waits, done)
	}
	return func() error {
		var paths []string
		for _, w := range waits {
			r := <-w
			if r.err != nil {
				return fmt.Errorf("profiling %s: %w", t.name, r.err)
			}
			paths = append(paths, r.path)
		}
		fmt.Fprintf(os.Stderr, "bench: %s's profiles written to %s\n", t.name, strings.Join(paths, ", "))
		return nil
	}
}

// saveSecureProfile fetches a CPU profile of seconds from the
// /debug/pprof/profile of the server rc reaches, into path.
func saveSecureProfile(ctx context.Context, rc *rest.Config, seconds int, path string) error {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", fmt.Sprint(seconds)).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("fetching the CPU profile of %s: %w", rc.Host, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}
