package introspect

import (
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// TestOwnerLookupsShareTableReads: 100 connections arriving at once are each given their owner
// (this test's user), with reads of the kernel's table at least ownerReadEvery apart — a flood
// of connections costs the agent one read per period, not one per connection.
func TestOwnerLookupsShareTableReads(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 100
	var servers []net.Conn
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		servers = append(servers, s)
	}
	owners.mu.Lock()
	before := owners.reads
	owners.mu.Unlock()
	start := time.Now()
	var wg sync.WaitGroup
	uids := make([]int64, n)
	errs := make([]error, n)
	for i, s := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); uids[i], errs[i] = socketOwner(s) }()
	}
	wg.Wait()
	elapsed := time.Since(start)
	owners.mu.Lock()
	reads := owners.reads - before
	owners.mu.Unlock()
	for i := range n {
		if errs[i] != nil || uids[i] != int64(os.Geteuid()) {
			t.Fatalf("connection %d: owner %d, %v; want %d", i, uids[i], errs[i], os.Geteuid())
		}
	}
	if limit := int(elapsed/ownerReadEvery) + 1; reads > limit || reads < 1 {
		t.Fatalf("%d table reads for %d lookups in %v; want 1 to %d (one per %v at most)", reads, n, elapsed, limit, ownerReadEvery)
	}
	t.Logf("%d lookups: %d table reads in %v", n, reads, elapsed)
}
