package sandbox

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// FreePorts returns n distinct free ports on 127.0.0.1. They are picked below
// the kernel's ephemeral range: a port from that range, released here and
// bound by a server a moment later, can meanwhile become the local port of
// some outgoing connection (there are many while clusters start), and the
// server then fails with "address already in use". The listeners are held
// until all n are known so no port is handed out twice.
//
// A port is handed out at most once per process: the caller's server binds
// it some time after FreePorts returns, and another cluster starting
// meanwhile must not get it too (it did, in a 12-cluster benchmark: two
// of 60 random ports drawn by different clusters were the same).
//
// Processes that start sandboxes side by side on one machine (test
// packages run at once) draw from ranges of their own (portSlot).
func FreePorts(n int) ([]int, error) {
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	low, high := portSlot()
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no free port in %d-%d after %d tries", low, high, tries)
		}
		port := low + rand.IntN(high-low)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		listeners = append(listeners, l)
		ports = append(ports, port)
	}
	for _, p := range ports {
		handedOut.ports[p] = true
	}
	return ports, nil
}

var handedOut = struct {
	mu    sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// portSlots is how many processes may start sandboxes side by side with
// ports that cannot collide: the ports below the ephemeral range are cut
// in as many ranges.
const portSlots = 4

// slot is this process's claim on a range of ports (portSlot): the lock
// file it holds until it exits. Kept here, so that no finalizer closes it.
var slot struct {
	once      sync.Once
	file      *os.File
	low, high int
}

// portSlot returns the range this process draws its ports from: one of
// portSlots slices of the ports from 10000 to the ephemeral range, the
// first whose lock file (in the temporary folder) no other process holds;
// the kernel lets the lock go when the process exits, however it ends. A
// process that finds every slot taken draws from the whole range, as each
// did before the slots.
func portSlot() (low, high int) {
	slot.once.Do(func() {
		slot.low, slot.high = 10000, ephemeralLow()
		width := (slot.high - slot.low) / portSlots
		for k := range portSlots {
			f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("flotilla-sandbox-ports-%d.lock", k)), os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				return
			}
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
				f.Close()
				continue
			}
			slot.file = f
			slot.low += k * width
			slot.high = slot.low + width
			return
		}
	})
	return slot.low, slot.high
}

// ephemeralLow is the first port of the kernel's ephemeral range, 32768 when
// it cannot be read.
func ephemeralLow() int {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil || low <= 11000 {
		return 32768
	}
	return low
}
