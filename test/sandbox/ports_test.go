package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPortSlotsOfTwoProcesses: a second process that starts sandboxes
// while this one does draws its ports from another range, so the two never
// hand out the same port (each knows only its own picks). The second is
// this test binary run again, printing its range.
func TestPortSlotsOfTwoProcesses(t *testing.T) {
	if os.Getenv("FLOTILLA_PORT_SLOT_CHILD") != "" {
		low, high := portSlot()
		fmt.Printf("range %d %d\n", low, high)
		return
	}
	low, high := portSlot()
	if high <= low {
		t.Fatalf("this process's range is empty: %d-%d", low, high)
	}
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if p < low || p >= high {
			t.Errorf("port %d outside this process's range %d-%d", p, low, high)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPortSlotsOfTwoProcesses$")
	cmd.Env = append(os.Environ(), "FLOTILLA_PORT_SLOT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the second process: %v\n%s", err, out)
	}
	var childLow, childHigh int
	for _, line := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(line, "range %d %d", &childLow, &childHigh); err == nil {
			break
		}
	}
	if childHigh <= childLow {
		t.Fatalf("no range from the second process:\n%s", out)
	}
	if childLow == 10000 && childHigh == ephemeralLow() {
		t.Skipf("every slot was taken (%d processes with sandboxes on this machine): the second process drew from the whole range", portSlots)
	}
	if childLow < high && low < childHigh {
		t.Errorf("the two processes' ranges overlap: %d-%d and %d-%d", low, high, childLow, childHigh)
	}
	t.Logf("this process %d-%d, the second %d-%d", low, high, childLow, childHigh)
}
