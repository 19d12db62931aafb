package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAPodsProcessIsStartedAgain: a process that stands in for a pod
// (Process.restarts) and exits on its own is started again after the
// back-off, again and again, as the kubelet restarts a container; once
// stopped or killed it stays down until started. One that is not a pod's
// (a control plane process) stays down when it exits.
func TestAPodsProcessIsStartedAgain(t *testing.T) {
	was, wasMax := restartBackoff, maxRestartBackoff
	restartBackoff, maxRestartBackoff = 50*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { restartBackoff, maxRestartBackoff = was, wasMax })
	dir := t.TempDir()
	starts := func(log string) int {
		data, _ := os.ReadFile(log)
		return strings.Count(string(data), "==== ") - strings.Count(string(data), "exited on its own")
	}
	waitStarts := func(log string, n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for starts(log) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d starts of %s, want %d", starts(log), log, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	quiet := func(log string, n int) {
		t.Helper()
		// Past several back-offs: no start may come.
		time.Sleep(10 * maxRestartBackoff)
		if got := starts(log); got != n {
			t.Errorf("%s started %d times, want %d", log, got, n)
		}
	}

	for _, end := range []struct {
		name string
		stop func(*Process) error
	}{{"stopped", (*Process).Stop}, {"killed", (*Process).Kill}} {
		t.Run("exits, restarted, then "+end.name, func(t *testing.T) {
			log := filepath.Join(dir, end.name+".log")
			p := newProcess(end.name, "/bin/sh", log, "-c", "sleep 0.05; exit 3")
			p.restarts = true
			if err := p.start(); err != nil {
				t.Fatal(err)
			}
			waitStarts(log, 3)
			if err := end.stop(p); err != nil {
				t.Fatal(err)
			}
			n := starts(log)
			quiet(log, n)
			if err := p.Start(); err != nil {
				t.Fatalf("started again by hand: %v", err)
			}
			waitStarts(log, n+1)
			if err := p.Kill(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("a control plane process stays down", func(t *testing.T) {
		log := filepath.Join(dir, "plain.log")
		p := newProcess("plain", "/bin/sh", log, "-c", "exit 3")
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		quiet(log, 1)
		if p.Running() {
			t.Error("running after it exited")
		}
	})
}
