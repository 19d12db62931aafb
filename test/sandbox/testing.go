package sandbox

import (
	"context"
	"os"
	"testing"
	"time"
)

// ForTest starts a sandbox for a test and stops it when the test ends. When
// the test fails, the sandbox folder (with every process's log) is kept and
// its path is printed; set FLOTILLA_KEEP_SANDBOX=1 to keep it always.
func ForTest(t testing.TB, opts Options) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "flotilla-"+sanitize(t.Name())+"-")
		if err != nil {
			t.Fatal(err)
		}
		opts.Dir = dir
	}
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping sandbox: %v", err)
		}
		if t.Failed() || os.Getenv("FLOTILLA_KEEP_SANDBOX") != "" {
			t.Logf("sandbox kept in %s (logs in %s)", s.Dir, s.LogDir)
			return
		}
		_ = os.RemoveAll(s.Dir)
	})
	return s
}

func sanitize(name string) string {
	out := []rune(name)
	for i, r := range out {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			out[i] = '-'
		}
	}
	if len(out) > 40 {
		out = out[:40]
	}
	return string(out)
}
