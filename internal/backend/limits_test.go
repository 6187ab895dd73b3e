package backend_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentd/agentd/internal/protocol"
)

// A report over 1 MiB is not sent (it would be refused with 413 and settle nothing): it comes
// back as too_large, so the submitter splits it; an empty one is not sent at all.
func TestReportsOverTheLimitAreNotSent(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"accepted":[],"rejected":[]}`))
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, "")
	var big []protocol.StateChange
	for i := 0; i < 100; i++ {
		big = append(big, change("c-"+strings.Repeat("x", i), "task/"+strings.Repeat("a", 12<<10), "RUNNING"))
	}
	if r := c.Report(context.Background(), big); r.Outcome != protocol.TooLarge || r.Err == nil {
		t.Fatalf("%+v; want too_large", r)
	}
	if r := c.Report(context.Background(), nil); r.Outcome == protocol.Settled {
		t.Fatalf("an empty report settled: %+v", r)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests sent; want none", n)
	}
	if r := c.Report(context.Background(), big[:1]); r.Outcome != protocol.Settled {
		t.Fatalf("a small report: %+v", r)
	}
}
