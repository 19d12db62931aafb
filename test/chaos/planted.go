package chaos

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// PlantedBinDir is a folder with the checkout's binaries, but an agent
// built with the build tag of a planted bug (pkg/reservation/planted_*.go),
// for a test to show that its checker catches that bug.
func PlantedBinDir(t *testing.T, tag string) string {
	t.Helper()
	root, err := sandbox.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	entries, err := os.ReadDir(filepath.Join(root, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "flotilla-agent" {
			continue
		}
		if err := os.Symlink(filepath.Join(root, "bin", e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-tags", tag, "-o", filepath.Join(dir, "flotilla-agent"), "./cmd/agent")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the agent with the planted bug (-tags %s): %v\n%s", tag, err, out)
	}
	return dir
}
