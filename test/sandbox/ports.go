package sandbox

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
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
func FreePorts(n int) ([]int, error) {
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	low, high := 10000, ephemeralLow()
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
