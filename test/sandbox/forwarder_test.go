package sandbox

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo serves an echo on a free port.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, msg string, within time.Duration) error {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(within))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		t.Fatalf("read %q, want %q", buf, msg)
	}
	return nil
}

func TestForwarderBlackhole(t *testing.T) {
	// The first backend refuses: connections go to the one that accepts.
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	refused.Close()
	f, err := NewForwarder(refusedAddr, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	open, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := roundTrip(t, open, "before", 5*time.Second); err != nil {
		t.Fatalf("forwarding: %v", err)
	}

	f.Blackhole()
	// An open connection and a new one both go silent, without an error.
	if err := roundTrip(t, open, "held", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("open connection through the blackhole: %v, want a timeout", err)
	}
	fresh, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatalf("a new connection must still be accepted: %v", err)
	}
	defer fresh.Close()
	if err := roundTrip(t, fresh, "new", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection through the blackhole: %v, want a timeout", err)
	}

	f.Heal()
	// What was held is delivered; both connections work again.
	buf := make([]byte, len("held"))
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(open, buf); err != nil || string(buf) != "held" {
		t.Fatalf("held bytes after healing: %q, %v", buf, err)
	}
	if err := roundTrip(t, open, "after", 5*time.Second); err != nil {
		t.Fatalf("open connection after healing: %v", err)
	}
	buf = make([]byte, len("new"))
	_ = fresh.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(fresh, buf); err != nil || string(buf) != "new" {
		t.Fatalf("new connection after healing: %q, %v", buf, err)
	}
}
