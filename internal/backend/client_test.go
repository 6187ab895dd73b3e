package backend_test

import (
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/backend"
	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/protocol"
)

func change(id, arn, status string) protocol.StateChange {
	return protocol.StateChange{ID: id, TaskARN: arn, Status: status, At: time.Now()}
}

func newClient(t *testing.T, url, tokenFile string) *backend.Client {
	t.Helper()
	c, err := backend.New(backend.Config{URL: url, AgentID: "agent-1", TokenFile: tokenFile, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestTokenRotationNeedsNoRestart(t *testing.T) {
	dir := t.TempDir()
	serverTok, agentTok := filepath.Join(dir, "server"), filepath.Join(dir, "agent")
	write := func(p, v string) {
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(serverTok, "old")
	write(agentTok, "old")
	srv := httptest.NewServer(controlplane.New(serverTok, controlplane.Faults{}).Handler())
	defer srv.Close()
	c := newClient(t, srv.URL, agentTok)
	if _, err := c.Poll(context.Background(), 0); err != nil {
		t.Fatalf("poll with the right token: %v", err)
	}
	write(serverTok, "new")
	r := c.Report(context.Background(), []protocol.StateChange{change("c-1", "task/x", "RUNNING")})
	if r.Outcome != protocol.Unauthorized || r.HTTPStatus != 401 {
		t.Fatalf("after the server rotated: %+v; want unauthorized", r)
	}
	time.Sleep(10 * time.Millisecond) // a different modification time on coarse file systems
	write(agentTok, "new-and-longer") // size differs too
	write(serverTok, "new-and-longer")
	if _, err := c.Poll(context.Background(), 0); err != nil {
		t.Fatalf("poll after the agent's token file was rotated: %v", err)
	}
}

func TestAnswersAreClassified(t *testing.T) {
	cp := controlplane.New("", controlplane.Faults{ThrottleRPS: 0.5, ThrottleBurst: 1})
	srv := httptest.NewServer(cp.Handler())
	defer srv.Close()
	c := newClient(t, srv.URL, "")
	if err := cp.AddTask("agent-1", protocol.Task{ARN: "task/x", DesiredStatus: "RUNNING", Containers: []protocol.Container{{Name: "app", Image: "web"}}}, nil); err != nil {
		t.Fatal(err)
	}
	r := c.Report(context.Background(), []protocol.StateChange{change("c-1", "task/x", "PULLED"), change("c-2", "task/nope", "PULLED")})
	if r.Outcome != protocol.Settled || len(r.Accepted) != 1 || r.Accepted[0] != "c-1" || len(r.Rejected) != 1 || r.Rejected[0].Error != "unknown_task" {
		t.Fatalf("first report: %+v", r)
	}
	r = c.Report(context.Background(), []protocol.StateChange{change("c-3", "task/x", "CREATED")})
	if r.Outcome != protocol.Throttled || r.RetryAfter < time.Second || r.RetryAfter > 2*time.Second {
		t.Fatalf("second report within the bucket: %+v; want throttled with Retry-After ≈ 2 s", r)
	}
	r = c.Report(context.Background(), nil)
	if r.Outcome != protocol.BadRequest {
		t.Fatalf("empty report: %+v; want bad_request", r)
	}
}

func TestFaultsAreUnknownOutcomesNotSettlements(t *testing.T) {
	for name, f := range map[string]controlplane.Faults{"5xx": {FailRate: 1, Seed: 1}, "dropped": {DropRate: 1, Seed: 1}} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(controlplane.New("", f).Handler())
			defer srv.Close()
			r := newClient(t, srv.URL, "").Report(context.Background(), []protocol.StateChange{change("c-1", "task/x", "RUNNING")})
			want := protocol.ServerError
			if name == "dropped" {
				want = protocol.Network
			}
			if r.Outcome != want || len(r.Accepted) != 0 {
				t.Fatalf("%+v; want %s, nothing settled", r, want)
			}
		})
	}
}

func TestPollErrorsNameTheirCause(t *testing.T) {
	for name, tc := range map[string]struct {
		body string
		want string
	}{
		"not JSON":  {"<html>gateway</html>", "not JSON"},
		"too large": {`{"payloads":[` + strings.Repeat(" ", protocol.MaxPollBody) + `]}`, "over 4194304 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(tc.body)) }))
			defer srv.Close()
			_, err := newClient(t, srv.URL, "").Poll(context.Background(), 0)
			var pe *backend.PollError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("poll: %v; want a PollError saying %q", err, tc.want)
			}
		})
	}
}

func TestBadConfigNamesTheFlag(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for cfg, want := range map[backend.Config]string{
		// A FIFO in the CA file's place is refused at once, never waited on (it hung the start).
		{URL: "https://x", AgentID: "a", CAFile: fifo}:             "--ca-file " + fifo + ": not a regular file",
		{URL: "ftp://x", AgentID: "a"}:                             "--backend",
		{URL: "http://x", AgentID: "a", TokenFile: "/nonexistent"}: "--token-file",
		{URL: "https://x", AgentID: "a", CAFile: "/nonexistent"}:   "--ca-file",
	} {
		if _, err := backend.New(cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v; want an error naming %s", cfg, err, want)
		}
	}
}

// An https backend is verified: against the system roots by default (a private CA fails),
// and with --ca-file against that CA.
func TestHTTPSBackendIsVerified(t *testing.T) {
	srv := httptest.NewTLSServer(controlplane.New("", controlplane.Faults{}).Handler())
	defer srv.Close()
	if _, err := newClient(t, srv.URL, "").Poll(context.Background(), 0); err == nil {
		t.Fatal("a backend with a certificate from an unknown CA was trusted")
	}
	c, err := backend.New(backend.Config{URL: srv.URL, AgentID: "agent-1", CAFile: serverCA(t, srv), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Poll(context.Background(), 0); err != nil {
		t.Fatalf("poll with --ca-file: %v", err)
	}
}

// A poll the control plane holds and then cuts without an answer (a hanging control plane at
// its return) fails: net/http would send a GET on a kept-alive connection again, the second
// poll would be answered as ever, and the poller would never learn that it was held (bench
// fleet's hanging outage: the agents polling afresh in the hang saw nothing of it).
func TestAPollCutWithoutAnAnswerFails(t *testing.T) {
	var polls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if polls.Add(1) == 2 {
			<-release // held, then cut
			panic(http.ErrAbortHandler)
		}
		_, _ = w.Write([]byte(`{"payloads":[]}`))
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, "")
	if _, err := c.Poll(context.Background(), 0); err != nil { // the connection is kept alive
		t.Fatal(err)
	}
	time.AfterFunc(200*time.Millisecond, func() { close(release) })
	_, err := c.Poll(context.Background(), 0)
	if !errors.Is(err, backend.ErrPollCut) {
		t.Fatalf("a poll held and cut without an answer: %v (%d polls reached the server); want ErrPollCut", err, polls.Load())
	}
	var pe *backend.PollError
	if !errors.As(err, &pe) || pe.HTTPStatus() != 0 {
		t.Fatalf("a cut poll: %v; want a PollError with no status (a transport failure)", err)
	}
}

// slowHandshakes delays every connection after the first before the server takes it up, so a
// TLS handshake on it takes that long: the latency of a control plane across a WAN (a TCP and
// a TLS round trip each, a slow resolver).
type slowHandshakes struct {
	net.Listener
	accepted atomic.Int32
	delay    time.Duration
}

func (l *slowHandshakes) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil && l.accepted.Add(1) > 1 {
		time.Sleep(l.delay) // network latency modelled, not a wait for an event
	}
	return c, err
}

// A poll sent on a kept-alive connection the control plane closed as the poll went out (an idle
// timeout's close crossing the request) was never held: net/http sends it again on a new
// connection, and however long that connection takes to set up (a TLS handshake across a WAN),
// the poll is not cut. Counting the hold up to when the new connection was ready made every
// such race with a slow handshake a "poll held and cut" — a transport failure, a warning, and
// the submitter told a hanging outage ended (Hung) when none began.
func TestAPollResentOnASlowNewConnectionWasNotCut(t *testing.T) {
	var polls atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if polls.Add(1) == 2 {
			panic(http.ErrAbortHandler) // closed as the poll came: never held
		}
		_, _ = w.Write([]byte(`{"payloads":[]}`))
	}))
	srv.Listener = &slowHandshakes{Listener: srv.Listener, delay: 300 * time.Millisecond}
	srv.StartTLS()
	defer srv.Close()
	c, err := backend.New(backend.Config{URL: srv.URL, AgentID: "agent-1", CAFile: serverCA(t, srv), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Poll(context.Background(), 0); err != nil { // the connection is kept alive
		t.Fatal(err)
	}
	if _, err := c.Poll(context.Background(), 0); err != nil {
		t.Fatalf("a poll whose kept-alive connection was closed as it went out, sent again on a slow new connection: %v (%d polls reached the server); want it answered", err, polls.Load())
	}
}

// serverCA writes srv's certificate to a file of the test's and returns its path: the CA file
// an agent trusting that test server is given.
func serverCA(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}
