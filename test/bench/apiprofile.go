package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// -profile-apiserver: the source API server's CPU profile of the Flotilla
// run, beside the agent's (-profile), to attribute the source cluster's CPU.
var (
	profileAPIServer  = flag.Bool("profile-apiserver", false, "Save a CPU profile of the source's kube-apiserver of the first -profile-apiserver-seconds of the Flotilla run into -out (…-src-apiserver-cpu.pprof), fetched from its /debug/pprof/profile with the admin credentials.")
	profileAPISeconds = flag.Int("profile-apiserver-seconds", 20, "With -profile-apiserver: how long the profile lasts.")
	// sourceAPIServer is the source's admin configuration, set once the
	// sandbox is up.
	sourceAPIServer *rest.Config
)

// startAPIServerProfile starts the source API server's CPU profile with
// -profile-apiserver and returns what waits for it and saves it.
func startAPIServerProfile(ctx context.Context, cfg config) func() error {
	if !*profileAPIServer || sourceAPIServer == nil {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	path := strings.Replace(cfg.profilePath("cpu"), "-agent-cpu", "-src-apiserver-cpu", 1)
	go func() { done <- saveAPIServerProfile(ctx, sourceAPIServer, *profileAPISeconds, path) }()
	return func() error {
		if err := <-done; err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: source API server profile written to %s\n", path)
		return nil
	}
}

func saveAPIServerProfile(ctx context.Context, rc *rest.Config, seconds int, path string) error {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", fmt.Sprint(seconds)).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("fetching the source API server's profile: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}
