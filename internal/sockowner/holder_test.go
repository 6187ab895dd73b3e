package sockowner_test

import (
	"net"
	"os"
	"testing"

	"github.com/agentd/agentd/internal/sockowner"
)

// Asking again who holds the same listener — the agent does on every retry of a squatted
// port — costs no second walk of every process's descriptors, and still names the holder.
func TestTheSameListenersHolderIsFoundOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().(*net.TCPAddr)
	first, err := sockowner.ListenerHolder(addr)
	if err != nil || first.PID != os.Getpid() {
		t.Fatalf("the holder of %s: %+v, %v; want this process", addr, first, err)
	}
	walks := sockowner.HolderWalks()
	for range 5 {
		if h, err := sockowner.ListenerHolder(addr); err != nil || h != first {
			t.Fatalf("asked again: %+v, %v; want %+v", h, err, first)
		}
	}
	if n := sockowner.HolderWalks() - walks; n != 0 {
		t.Errorf("%d more walks of every process's descriptors for the same listener; want 0", n)
	}
}
