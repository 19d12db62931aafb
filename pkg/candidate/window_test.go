package candidate

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/pkg/target"
)

func targets(t *testing.T, n int) []*target.Target {
	t.Helper()
	var out []*target.Target
	for i := range n {
		// Never started: their caches are empty, which is all Eligible reads.
		tg, err := target.New(fmt.Sprintf("t%d", i+1), false, &rest.Config{Host: "https://127.0.0.1:1"}, "src")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tg)
	}
	return out
}

func TestEligibleSpreadsAndIsStable(t *testing.T) {
	ts := targets(t, 3)
	if got := Eligible(sourcePod(t), "src", ts, 0); len(got) != 3 {
		t.Fatalf("max 0 must mean every target, got %d", len(got))
	}
	first := map[string]int{}
	for i := range 3000 {
		src := sourcePod(t)
		src.UID = types.UID(fmt.Sprintf("uid-%d", i))
		got := Eligible(src, "src", ts, 1)
		if len(got) != 1 {
			t.Fatalf("max 1 gave %d targets", len(got))
		}
		again := Eligible(src, "src", ts, 1)
		if again[0] != got[0] {
			t.Fatal("a pod's first target changed between calls")
		}
		first[got[0].Name]++
	}
	// Names that differ only in their last character, as is common, must
	// still share the pods evenly (within a few percent of a third).
	for name, n := range first {
		if n < 900 || n > 1100 {
			t.Errorf("target %s is first for %d of 3000 pods: %v", name, n, first)
		}
	}
}
