package sandbox

import (
	"io"
	"net"
	"sync"
	"time"
)

// Forwarder is a TCP address in front of one or more backends, as a Service
// or a network path is: each connection goes to the first backend that
// accepts it, starting with a different one each time (or, once Routed, in
// the order given). It can be switched to a blackhole: connections stay
// open, new ones are accepted, and not a byte moves either way until it is
// healed, as when packets are dropped on the way rather than refused.
type Forwarder struct {
	ln net.Listener

	mu       sync.Mutex
	backends []string
	ordered  bool
	next     int
	gen      int           // counts Route calls
	hole     chan struct{} // closed while forwarding; open while blackholed
	conns    map[net.Conn]struct{}
	served   map[string]int
}

// NewForwarder listens on a free port of 127.0.0.1 and forwards to backends.
func NewForwarder(backends ...string) (*Forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	f := &Forwarder{ln: ln, backends: backends, hole: open, conns: map[net.Conn]struct{}{}, served: map[string]int{}}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go f.forward(conn)
		}
	}()
	return f, nil
}

// SetBackends replaces the backends new connections go to.
func (f *Forwarder) SetBackends(backends ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backends = backends
}

// Route sends every new connection to the first of backends, in this
// order, that accepts it, and closes every open connection, so that a
// client's next call follows the new order.
func (f *Forwarder) Route(backends ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backends, f.ordered = backends, true
	f.gen++
	for c := range f.conns {
		_ = c.Close()
	}
}

// Served is how many connections went to backend.
func (f *Forwarder) Served(backend string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served[backend]
}

// Addr is the address to connect to.
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

// Blackhole stops every byte, on open and new connections alike.
func (f *Forwarder) Blackhole() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.hole:
		f.hole = make(chan struct{})
	default:
	}
}

// Heal lets the bytes held and new ones through again.
func (f *Forwarder) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.hole:
	default:
		close(f.hole)
	}
}

// Close stops listening and closes every connection.
func (f *Forwarder) Close() {
	_ = f.ln.Close()
	f.Heal()
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.Close()
	}
}

// pass blocks while the forwarder is a blackhole.
func (f *Forwarder) pass() {
	f.mu.Lock()
	hole := f.hole
	f.mu.Unlock()
	<-hole
}

func (f *Forwarder) track(c net.Conn, add bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if add {
		f.conns[c] = struct{}{}
	} else {
		delete(f.conns, c)
	}
}

func (f *Forwarder) forward(client net.Conn) {
	f.track(client, true)
	defer f.track(client, false)
	defer client.Close()
	f.pass()
	f.mu.Lock()
	start := f.next
	f.next++
	if f.ordered {
		start = 0
	}
	backends, gen := f.backends, f.gen
	f.mu.Unlock()
	var backend net.Conn
	addr := ""
	for i := range backends {
		addr = backends[(start+i)%len(backends)]
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			backend = conn
			break
		}
	}
	if backend == nil {
		return
	}
	f.mu.Lock()
	if gen != f.gen {
		// Routed again while this one was dialing.
		f.mu.Unlock()
		_ = backend.Close()
		return
	}
	f.served[addr]++
	f.mu.Unlock()
	f.track(backend, true)
	defer f.track(backend, false)
	defer backend.Close()
	done := make(chan struct{})
	go func() {
		f.copy(backend, client)
		_ = backend.Close()
		close(done)
	}()
	f.copy(client, backend)
	_ = client.Close()
	<-done
}

// copy moves bytes from src to dst, holding them while blackholed.
func (f *Forwarder) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.pass()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
