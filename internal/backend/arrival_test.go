package backend_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/backend"
	"github.com/agentd/agentd/internal/protocol"
)

// lateReader is a connection on a busy host: nothing it received is read until open closes.
type lateReader struct {
	*net.TCPConn
	open <-chan struct{}
}

func (c lateReader) Read(b []byte) (int, error) {
	<-c.open
	return c.TCPConn.Read(b)
}

// busyHost is a client whose reads wait for open, and a server whose handler answers with
// answer and then says when the answer had left it.
func busyHost(t *testing.T, answer http.HandlerFunc) (c *backend.Client, open chan struct{}, written chan time.Time) {
	t.Helper()
	open, written = make(chan struct{}), make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, r)
		w.(http.Flusher).Flush()
		written <- time.Now()
	}))
	t.Cleanup(srv.Close)
	c = newClient(t, srv.URL, "")
	backend.DialWith(c, func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return lateReader{TCPConn: conn.(*net.TCPConn), open: open}, nil
	})
	return c, open, written
}

// readLate lets the client read only busy after the server's answer had left it, and returns
// when it left and when the client was let read.
func readLate(t *testing.T, open chan struct{}, written chan time.Time, busy time.Duration) (left, read time.Time) {
	t.Helper()
	select {
	case left = <-written:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never answered")
	}
	time.Sleep(busy) // the host busy elsewhere: the scenario, not a wait for an event
	read = time.Now()
	close(open)
	return left, read
}

// checkArrival says whether an answer that left the server at left and was read at read is
// counted from its arrival: at most a kernel tick after it left, well before the read.
func checkArrival(t *testing.T, what string, begun, left, read, got time.Time) {
	t.Helper()
	if runtime.GOOS != "linux" {
		if got.Before(read) {
			t.Fatalf("%s received %v before the read, off Linux where the kernel is not asked", what, read.Sub(got))
		}
		return
	}
	if got.Before(begun) || got.After(left.Add(20*time.Millisecond)) {
		t.Fatalf("%s received %v after the answer left the server (read %v after); want its arrival, within a kernel tick of leaving",
			what, got.Sub(left), read.Sub(left))
	}
}

// A poll answered while the host is too busy to read it for 300 ms: the payloads say when
// they arrived, not when they were read (the fleet's burst counts from that: submit.Polled.ReceivedAt).
func TestAPollReadLateSaysWhenItsPayloadsArrived(t *testing.T) {
	c, open, written := busyHost(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"payloads": [{"message_id": "m-1", "tasks": []}]}`))
	})
	begun := time.Now()
	got := make(chan []protocol.Payload, 1)
	go func() {
		ps, err := c.Poll(context.Background(), 0)
		if err != nil {
			t.Error(err)
		}
		got <- ps
	}()
	left, read := readLate(t, open, written, 300*time.Millisecond)
	ps := <-got
	if len(ps) != 1 {
		t.Fatalf("poll brought %d payloads; want 1", len(ps))
	}
	checkArrival(t, "the payload", begun, left, read, ps[0].ReceivedAt)
}

// A 429 read late: its turn counts from when it arrived.
func TestA429ReadLateSaysWhenItArrived(t *testing.T) {
	c, open, written := busyHost(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	begun := time.Now()
	got := make(chan protocol.ReportResult, 1)
	go func() {
		got <- c.Report(context.Background(), []protocol.StateChange{change("c-1", "task/1", "RUNNING")})
	}()
	left, read := readLate(t, open, written, 300*time.Millisecond)
	r := <-got
	if r.Outcome != protocol.Throttled || r.RetryAfter != 2*time.Second {
		t.Fatalf("answer read as %s, Retry-After %v; want throttled, 2 s", r.Outcome, r.RetryAfter)
	}
	checkArrival(t, "the 429", begun, left, read, r.ReceivedAt)
}

// The arrival is the host's own measure: a control plane that writes one into its answer (in
// any spelling) is not believed, so it cannot move where the agent counts its burst from.
func TestAControlPlaneCannotNameItsAnswersArrival(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"payloads": [{"message_id": "m-1", "tasks": [], "ReceivedAt": "2000-01-01T00:00:00Z",
			"received_at": "2000-01-01T00:00:00Z", "receivedAt": "2000-01-01T00:00:00Z"}]}`))
	}))
	t.Cleanup(srv.Close)
	begun := time.Now()
	ps, err := newClient(t, srv.URL, "").Poll(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].ReceivedAt.Before(begun) || ps[0].ReceivedAt.After(time.Now()) {
		t.Fatalf("payloads %+v: want one, received within the poll (from %v), whatever the answer says", ps, begun)
	}
}
