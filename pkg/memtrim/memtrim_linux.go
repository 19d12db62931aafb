package memtrim

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Trim unmaps the read-only pages of the process's executable (its code,
// read-only data and the tables the runtime reads), which later accesses
// map again from the file. It returns the resident memory from files
// before and after, in bytes.
//
// Only a position-dependent executable (ELF type EXEC, as Go links one
// by default) is trimmed, and only its segments that the file maps
// without write permission, outside any segment made read-only after
// relocation (PT_GNU_RELRO): those pages hold what the file holds, so
// dropping them loses nothing. A position-independent one is left as it
// is.
func Trim() (before, after int64, err error) {
	before = rssFile()
	ranges, err := ownSegments()
	if err != nil {
		return before, before, err
	}
	for _, r := range ranges {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, unix.MADV_DONTNEED); errno != 0 {
			return before, rssFile(), fmt.Errorf("madvise %#x-%#x: %w", r.start, r.end, errno)
		}
	}
	return before, rssFile(), nil
}

type span struct{ start, end uintptr }

// ownSegments are the process's own readOnlySegments, read from its
// executable once: they do not change while it runs.
var ownSegments = sync.OnceValues(func() ([]span, error) { return readOnlySegments("/proc/self/exe") })

// readOnlySegments are the page-aligned address ranges of the executable
// at path that may be trimmed: none for a position-independent one.
func readOnlySegments(path string) ([]span, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the executable: %w", err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		return nil, nil
	}
	page := uint64(os.Getpagesize())
	var relro []span
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_RELRO {
			relro = append(relro, span{uintptr(p.Vaddr &^ (page - 1)), uintptr((p.Vaddr + p.Memsz + page - 1) &^ (page - 1))})
		}
	}
	var out []span
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W != 0 || p.Filesz == 0 {
			continue
		}
		// Whole pages within what the file holds.
		s := span{uintptr((p.Vaddr + page - 1) &^ (page - 1)), uintptr((p.Vaddr + p.Filesz) &^ (page - 1))}
		if s.end <= s.start || overlaps(s, relro) {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

func overlaps(s span, others []span) bool {
	for _, o := range others {
		if s.start < o.end && o.start < s.end {
			return true
		}
	}
	return false
}

// rssFile is the process's resident memory from files, in bytes (0 when
// it cannot be read).
func rssFile() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssFile:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
