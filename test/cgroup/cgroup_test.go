package cgroup

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// This machine's shape: v1 controllers each on its own, and a unified
// hierarchy without cpu (hybrid).
const hybrid = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

// systemd's v1 shape: cpu and cpuacct co-mounted.
const comounted = `25 24 0:22 / /sys/fs/cgroup/systemd rw,nosuid shared:9 - cgroup cgroup rw,xattr,name=systemd
28 24 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,cpu,cpuacct
29 24 0:26 / /sys/fs/cgroup/cpuset rw,nosuid shared:13 - cgroup cgroup rw,cpuset
`

const unified = `30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
31 24 0:27 / /sys/fs/my\040cgroups rw - tmpfs tmpfs rw
`

func TestFindMountsAndChoose(t *testing.T) {
	for _, tc := range []struct {
		name, mountinfo, controllers string
		want                         Hierarchy
		wantErr                      string
	}{
		{name: "hybrid", mountinfo: hybrid, controllers: "hugetlb\n", want: Hierarchy{Version: V1, CPU: "/sys/fs/cgroup/cpu", Acct: "/sys/fs/cgroup/cpuacct"}},
		{name: "co-mounted", mountinfo: comounted, want: Hierarchy{Version: V1, CPU: "/sys/fs/cgroup/cpu,cpuacct", Acct: "/sys/fs/cgroup/cpu,cpuacct"}},
		{name: "unified", mountinfo: unified, controllers: "cpuset cpu io memory pids\n", want: Hierarchy{Version: V2, CPU: "/sys/fs/cgroup"}},
		{name: "unified without cpu", mountinfo: unified, controllers: "memory pids\n", wantErr: `offers only "memory pids"`},
		{name: "none", mountinfo: "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n", wantErr: "no cpu controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Choose(FindMounts(tc.mountinfo), tc.controllers)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *h != tc.want {
				t.Errorf("got %+v, want %+v", *h, tc.want)
			}
		})
	}
	if got := unescapeMount(`/sys/fs/my\040cgroups`); got != "/sys/fs/my cgroups" {
		t.Errorf("unescapeMount = %q", got)
	}
}

func TestQuota(t *testing.T) {
	for _, tc := range []struct {
		cores float64
		v1    int64
		v2    string
	}{
		{0.45, 45000, "45000 100000"},
		{1, 100000, "100000 100000"},
		{2.5, 250000, "250000 100000"},
		{0.001, 1000, "1000 100000"}, // the kernel's minimum
		{0, -1, "max 100000"},
		{-1, -1, "max 100000"},
	} {
		if got := QuotaV1(tc.cores, Period); got != tc.v1 {
			t.Errorf("QuotaV1(%g) = %d, want %d", tc.cores, got, tc.v1)
		}
		if got := CPUMax(tc.cores, Period); got != tc.v2 {
			t.Errorf("CPUMax(%g) = %q, want %q", tc.cores, got, tc.v2)
		}
	}
}

func TestParseCPUStat(t *testing.T) {
	v1 := "nr_periods 1200\nnr_throttled 300\nthrottled_time 4500000000\nnr_bursts 0\nburst_time 0\n"
	s, err := ParseCPUStat(V1, v1)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{UsageSeconds: -1, Periods: 1200, Throttled: 300, ThrottledSeconds: 4.5}); s != want {
		t.Errorf("v1: got %+v, want %+v", s, want)
	}
	if f := s.ThrottledFraction(); f != 0.25 {
		t.Errorf("ThrottledFraction = %g", f)
	}
	v2 := "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 50\nnr_throttled 5\nthrottled_usec 250000\nnr_bursts 0\nburst_usec 0\n"
	s2, err := ParseCPUStat(V2, v2)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{UsageSeconds: 2.5, Periods: 50, Throttled: 5, ThrottledSeconds: 0.25}); s2 != want {
		t.Errorf("v2: got %+v, want %+v", s2, want)
	}
	if _, err := ParseCPUStat(V2, v1); err == nil || !strings.Contains(err.Error(), "usage_usec") {
		t.Errorf("v1 text read as v2: err = %v", err)
	}
	if _, err := ParseCPUStat(V1, "nr_periods x\n"); err == nil {
		t.Error("a bad number was accepted")
	}
	u, err := ParseAcctUsage("1500000000\n")
	if err != nil || u != 1.5 {
		t.Errorf("ParseAcctUsage = %g, %v", u, err)
	}
	d := s2.Sub(Stats{UsageSeconds: 0.5, Periods: 10, Throttled: 1, ThrottledSeconds: 0.05})
	if d.UsageSeconds != 2 || d.Periods != 40 || d.Throttled != 4 || d.ThrottledSeconds < 0.1999 || d.ThrottledSeconds > 0.2001 {
		t.Errorf("Sub = %+v", d)
	}
	if d := s.Sub(Stats{}); d.UsageSeconds != -1 {
		t.Errorf("Sub without usage = %+v, want usage -1", d)
	}
	if (Stats{}).ThrottledFraction() != 0 {
		t.Error("no periods, yet throttled")
	}
}

// TestGroup makes a real group where the machine allows it (root, a cpu
// controller): a busy child, capped at 0.2 cores, is throttled.
func TestGroup(t *testing.T) {
	if os.Geteuid() != 0 || testing.Short() {
		t.Skip("needs root")
	}
	h, err := Detect()
	if err != nil {
		t.Skip(err)
	}
	g, err := h.New("unit-test", 0.2)
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
		// Root in a container whose cgroups are read-only: the bench says
		// so with -cpu-per-cluster; nothing to test here.
		t.Skip(err)
	}
	if err != nil {
		h.RemoveParent()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Remove(5 * time.Second); err != nil {
			t.Error(err)
		}
		h.RemoveParent()
	})
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "while :; do :; done"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Kill(); _, _ = p.Wait() }()
	if err := g.Add(p.Pid); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Throttled == 0 || s.ThrottledFraction() < 0.5 {
		t.Errorf("a busy loop capped at 0.2 cores was not throttled: %+v", s)
	}
	if s.UsageSeconds >= 0 && (s.UsageSeconds > 0.4 || s.UsageSeconds < 0.05) {
		t.Errorf("used %.2f s of CPU in 1 s at 0.2 cores", s.UsageSeconds)
	}
	_ = p.Kill()
	_, _ = p.Wait()
}
