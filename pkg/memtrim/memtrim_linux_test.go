package memtrim

import (
	"net"
	"os/user"
	"testing"
)

// TestTrim: trimming this test binary lowers its resident memory from
// files, and the process runs on: its code, its read-only data and, when
// it is linked with the C library, the calls through it (a lookup of the
// current user and of localhost) work after it. A trim that dropped pages
// written after loading (relocations) would crash here.
func TestTrim(t *testing.T) {
	before, after, err := Trim()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resident from files: %d KiB -> %d KiB", before>>10, after>>10)
	if before == 0 || after >= before {
		t.Errorf("resident from files %d -> %d bytes: want it lower", before, after)
	}
	for range 2 {
		if _, err := user.Current(); err != nil {
			t.Logf("user.Current: %v", err)
		}
		if _, err := net.LookupHost("localhost"); err != nil {
			t.Logf("LookupHost: %v", err)
		}
		if _, _, err := Trim(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadOnlySegments: the segments trimmed are whole pages, none of
// them writable in the file.
func TestReadOnlySegments(t *testing.T) {
	spans, err := readOnlySegments("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) == 0 {
		t.Fatal("no segment to trim in a Go test binary")
	}
	for _, s := range spans {
		if s.start%4096 != 0 || s.end%4096 != 0 || s.end <= s.start {
			t.Errorf("span %#x-%#x is not whole pages", s.start, s.end)
		}
	}
}

// TestPeriodicOnce: with no interval, Periodic trims once and returns.
func TestPeriodicOnce(t *testing.T) {
	if err := (Periodic{}).Start(t.Context()); err != nil {
		t.Fatal(err)
	}
}
