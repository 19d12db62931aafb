// Package cgroup gives processes of the test harnesses a CPU budget: one
// cgroup per sandbox cluster under <cpu hierarchy>/flotilla-bench, with a CFS
// quota, and reads back what the group used and how often it was throttled.
// It works on cgroup v1 (the cpu controller, and cpuacct for the usage when
// it is mounted) and on cgroup v2 (cpu.max, cpu.stat).
//
// The parsing and formatting are pure functions; the rest is a thin layer
// over the cgroup filesystem, which needs root.
package cgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Version is the cgroup version of the hierarchy used.
type Version int

const (
	V1 Version = 1
	V2 Version = 2
)

func (v Version) String() string { return "cgroup v" + strconv.Itoa(int(v)) }

// Parent is the folder, under the cpu hierarchy's root, that holds the groups.
const Parent = "flotilla-bench"

// Period is the CFS period every group gets, in microseconds (the kernel's
// default).
const Period = 100000

// Hierarchy is where the cpu controller is mounted.
type Hierarchy struct {
	Version Version
	// CPU is the mount point of the cpu controller (v1) or of the unified
	// hierarchy (v2).
	CPU string
	// Acct is the mount point of the v1 cpuacct controller when it is
	// mounted (it may be CPU itself, co-mounted); "" when it is not, and
	// with v2, whose cpu.stat has the usage.
	Acct string
}

// Mounts is what FindMounts read from a mountinfo file.
type Mounts struct {
	// CPUv1 and AcctV1 are the mount points of the v1 hierarchies with the
	// cpu and the cpuacct controller, "" when there is none.
	CPUv1, AcctV1 string
	// V2 is the mount point of the unified hierarchy, "" when there is none.
	V2 string
}

// FindMounts reads /proc/self/mountinfo's text: the v1 hierarchies with the
// cpu and cpuacct controllers and the cgroup2 mount.
func FindMounts(mountinfo string) Mounts {
	var m Mounts
	for line := range strings.Lines(mountinfo) {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		mountPoint := unescapeMount(f[4])
		switch g[0] {
		case "cgroup2":
			if m.V2 == "" {
				m.V2 = mountPoint
			}
		case "cgroup":
			for opt := range strings.SplitSeq(g[2], ",") {
				switch {
				case opt == "cpu" && m.CPUv1 == "":
					m.CPUv1 = mountPoint
				case opt == "cpuacct" && m.AcctV1 == "":
					m.AcctV1 = mountPoint
				}
			}
		}
	}
	return m
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Choose picks the hierarchy to use: a v1 cpu controller if one is mounted
// (a hybrid machine keeps its controllers there), else the unified
// hierarchy if its controllers (v2Controllers, the text of its
// cgroup.controllers) include cpu.
func Choose(m Mounts, v2Controllers string) (*Hierarchy, error) {
	if m.CPUv1 != "" {
		return &Hierarchy{Version: V1, CPU: m.CPUv1, Acct: m.AcctV1}, nil
	}
	if m.V2 != "" {
		for _, c := range strings.Fields(v2Controllers) {
			if c == "cpu" {
				return &Hierarchy{Version: V2, CPU: m.V2}, nil
			}
		}
		return nil, fmt.Errorf("no cpu controller: no cgroup v1 hierarchy has it and the cgroup v2 hierarchy at %s offers only %q", m.V2, strings.TrimSpace(v2Controllers))
	}
	return nil, errors.New("no cpu controller: no cgroup v1 hierarchy with cpu and no cgroup v2 hierarchy is mounted (see /proc/self/mountinfo)")
}

// Detect finds the cpu controller of this machine and checks that groups can
// be made there: the process must be root and the hierarchy writable.
func Detect() (*Hierarchy, error) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroup: reading mountinfo: %w", err)
	}
	m := FindMounts(string(raw))
	var controllers []byte
	if m.V2 != "" {
		controllers, _ = os.ReadFile(filepath.Join(m.V2, "cgroup.controllers"))
	}
	h, err := Choose(m, string(controllers))
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if uid := os.Geteuid(); uid != 0 {
		return nil, fmt.Errorf("cgroup: making CPU cgroups needs root, this runs as uid %d", uid)
	}
	if err := h.mkParents(); err != nil {
		return nil, err
	}
	return h, nil
}

// mkParents makes <hierarchy>/flotilla-bench (and with v2 lets its children
// use the cpu controller).
func (h *Hierarchy) mkParents() error {
	for _, root := range h.roots() {
		if err := mkdir(filepath.Join(root, Parent)); err != nil {
			return err
		}
	}
	if h.Version == V2 {
		for _, dir := range []string{h.CPU, filepath.Join(h.CPU, Parent)} {
			if err := write(filepath.Join(dir, "cgroup.subtree_control"), "+cpu"); err != nil {
				return fmt.Errorf("%w (cgroup v2 lets a group's children use cpu only when the group holds no process itself)", err)
			}
		}
	}
	return nil
}

// roots are the hierarchies a group is made in: cpu, and cpuacct when it is
// a v1 hierarchy of its own.
func (h *Hierarchy) roots() []string {
	if h.Acct != "" && h.Acct != h.CPU {
		return []string{h.CPU, h.Acct}
	}
	return []string{h.CPU}
}

func mkdir(dir string) error {
	err := os.Mkdir(dir, 0o755)
	switch {
	case err == nil, errors.Is(err, os.ErrExist):
		return nil
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("cgroup: %s is on a read-only cgroup filesystem (a container without a writable cgroup mount?)", dir)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("cgroup: not allowed to make %s: %w", dir, err)
	}
	return fmt.Errorf("cgroup: %w", err)
}

func write(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		if errors.Is(err, syscall.EROFS) {
			return fmt.Errorf("cgroup: writing %q to %s: read-only cgroup filesystem", value, path)
		}
		return fmt.Errorf("cgroup: writing %q to %s: %w", value, path, err)
	}
	return nil
}

// QuotaV1 is cpu.cfs_quota_us for cores CPUs over period microseconds: -1
// (no limit) for 0 or less, at least the kernel's minimum of 1000.
func QuotaV1(cores float64, period int64) int64 {
	if cores <= 0 {
		return -1
	}
	return max(1000, int64(math.Round(cores*float64(period))))
}

// CPUMax is cgroup v2's cpu.max for cores CPUs over period microseconds:
// "<quota> <period>", or "max <period>" for no limit.
func CPUMax(cores float64, period int64) string {
	q := QuotaV1(cores, period)
	if q < 0 {
		return "max " + strconv.FormatInt(period, 10)
	}
	return strconv.FormatInt(q, 10) + " " + strconv.FormatInt(period, 10)
}

// Stats are what a group used and how often its quota stopped it.
type Stats struct {
	// UsageSeconds is the CPU time of every task of the group; -1 when the
	// machine has no cpuacct (v1).
	UsageSeconds float64 `json:"usageSeconds"`
	// Periods are the CFS periods in which the group had runnable tasks;
	// Throttled, those in which it ran out of quota.
	Periods   int64 `json:"periods"`
	Throttled int64 `json:"throttledPeriods"`
	// ThrottledSeconds is how long its tasks waited for the next period.
	ThrottledSeconds float64 `json:"throttledSeconds"`
}

// ParseCPUStat reads a cpu.stat file: v1 (nr_periods, nr_throttled,
// throttled_time in ns; no usage, which is cpuacct's: UsageSeconds is -1)
// or v2 (usage_usec, nr_periods, nr_throttled, throttled_usec).
func ParseCPUStat(v Version, text string) (Stats, error) {
	vals := map[string]int64{}
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return Stats{}, fmt.Errorf("cpu.stat: %q: %w", strings.TrimSpace(line), err)
		}
		vals[f[0]] = n
	}
	need := []string{"nr_periods", "nr_throttled", "throttled_time"}
	if v == V2 {
		need = []string{"usage_usec", "nr_periods", "nr_throttled", "throttled_usec"}
	}
	for _, k := range need {
		if _, ok := vals[k]; !ok {
			return Stats{}, fmt.Errorf("cpu.stat (%s) has no %s", v, k)
		}
	}
	s := Stats{UsageSeconds: -1, Periods: vals["nr_periods"], Throttled: vals["nr_throttled"]}
	if v == V2 {
		s.UsageSeconds = float64(vals["usage_usec"]) / 1e6
		s.ThrottledSeconds = float64(vals["throttled_usec"]) / 1e6
	} else {
		s.ThrottledSeconds = float64(vals["throttled_time"]) / 1e9
	}
	return s, nil
}

// ParseAcctUsage reads cgroup v1's cpuacct.usage (ns) as seconds.
func ParseAcctUsage(text string) (float64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cpuacct.usage: %w", err)
	}
	return float64(n) / 1e9, nil
}

// Sub is what was used between o and s.
func (s Stats) Sub(o Stats) Stats {
	d := Stats{Periods: s.Periods - o.Periods, Throttled: s.Throttled - o.Throttled, ThrottledSeconds: s.ThrottledSeconds - o.ThrottledSeconds, UsageSeconds: -1}
	if s.UsageSeconds >= 0 && o.UsageSeconds >= 0 {
		d.UsageSeconds = s.UsageSeconds - o.UsageSeconds
	}
	return d
}

// ThrottledFraction is the share of the periods with runnable tasks in
// which the group ran out of quota.
func (s Stats) ThrottledFraction() float64 {
	if s.Periods <= 0 {
		return 0
	}
	return float64(s.Throttled) / float64(s.Periods)
}

// Group is one cgroup with a CPU quota.
type Group struct {
	Name  string
	Cores float64
	h     *Hierarchy
	// dirs are the group's folders: in the cpu hierarchy, and in cpuacct's
	// when that is another one.
	dirs []string
}

// New makes the group <hierarchy>/flotilla-bench/<name> with a quota of
// cores CPUs (0: no quota). A group of that name left by an earlier run is
// removed first; one that still holds processes is an error.
func (h *Hierarchy) New(name string, cores float64) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/.") {
		return nil, fmt.Errorf("cgroup: bad group name %q", name)
	}
	g := &Group{Name: name, Cores: cores, h: h}
	for _, root := range h.roots() {
		dir := filepath.Join(root, Parent, name)
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cgroup: %s is left from an earlier run and cannot be removed (does another run use it?): %w", dir, err)
		}
		if err := mkdir(dir); err != nil {
			return nil, err
		}
		g.dirs = append(g.dirs, dir)
	}
	var err error
	if h.Version == V2 {
		err = write(filepath.Join(g.dirs[0], "cpu.max"), CPUMax(cores, Period))
	} else if err = write(filepath.Join(g.dirs[0], "cpu.cfs_period_us"), strconv.Itoa(Period)); err == nil {
		err = write(filepath.Join(g.dirs[0], "cpu.cfs_quota_us"), strconv.FormatInt(QuotaV1(cores, Period), 10))
	}
	if err != nil {
		_ = g.Remove(0)
		return nil, err
	}
	return g, nil
}

// Dir is the group's folder in the cpu hierarchy.
func (g *Group) Dir() string { return g.dirs[0] }

// Add moves the process pid, with all its threads, into the group; what it
// starts afterwards is born there.
func (g *Group) Add(pid int) error {
	for _, dir := range g.dirs {
		if err := write(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// Stats reads what the group has used since it was made.
func (g *Group) Stats() (Stats, error) {
	raw, err := os.ReadFile(filepath.Join(g.dirs[0], "cpu.stat"))
	if err != nil {
		return Stats{}, fmt.Errorf("cgroup: %w", err)
	}
	s, err := ParseCPUStat(g.h.Version, string(raw))
	if err != nil || g.h.Version == V2 || g.h.Acct == "" {
		return s, err
	}
	acct := g.dirs[len(g.dirs)-1]
	raw, err = os.ReadFile(filepath.Join(acct, "cpuacct.usage"))
	if err != nil {
		return Stats{}, fmt.Errorf("cgroup: %w", err)
	}
	s.UsageSeconds, err = ParseAcctUsage(string(raw))
	return s, err
}

// Procs lists the processes in the group.
func (g *Group) Procs() ([]int, error) {
	raw, err := os.ReadFile(filepath.Join(g.dirs[0], "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(raw)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Remove deletes the group. It waits up to wait for its processes to exit;
// those left then are moved to the hierarchy's root, uncapped.
func (g *Group) Remove(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		procs, err := g.Procs()
		if err != nil || len(procs) == 0 || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for i, dir := range g.dirs {
		root := g.h.roots()[i]
		if raw, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(raw)) {
				_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(pid), 0o644)
			}
		}
		// The kernel may take a moment to let go of a group its last task left.
		var err error
		for range 20 {
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroup: removing %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// RemoveParent deletes <hierarchy>/flotilla-bench once it holds no group.
func (h *Hierarchy) RemoveParent() {
	for _, root := range h.roots() {
		_ = os.Remove(filepath.Join(root, Parent))
	}
}
