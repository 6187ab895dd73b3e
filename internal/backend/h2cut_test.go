package backend_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/agentd/agentd/internal/backend"
)

// h2Proxy is a control plane behind an HTTP/2-only proxy (TLS, ALPN h2 and nothing else),
// written in raw frames so that a test can cut a held poll each way an h2 server or proxy
// can: the poll it is sent second is held, then cut; every other poll is answered with no
// payloads — which is how a poll the client re-sent unseen would look.
type h2Proxy struct {
	t     *testing.T
	hold  time.Duration
	cut   func(c *h2Conn, stream uint32) // how the held poll is cut
	polls atomic.Int32                   // poll requests (HEADERS opening a stream), on every connection
	cutAt atomic.Int64                   // when the held poll was cut (unix ns), 0 before

	mu    sync.Mutex
	conns []*tls.Conn
}

// h2Conn is one client connection: frames are read by its serving goroutine and written by
// whichever goroutine holds mu.
type h2Conn struct {
	tls *tls.Conn
	mu  sync.Mutex
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func (c *h2Conn) write(f func(fr *http2.Framer) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = f(c.fr) // a write to a connection the client dropped fails: nothing to answer then
}

// answer is a 200 with no payloads on stream.
func (c *h2Conn) answer(stream uint32) {
	c.write(func(fr *http2.Framer) error {
		c.buf.Reset()
		_ = c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		_ = c.enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/json"})
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: c.buf.Bytes(), EndHeaders: true}); err != nil {
			return err
		}
		return fr.WriteData(stream, true, []byte(`{"payloads":[]}`))
	})
}

// dropTCP ends the connection under TLS and HTTP/2 without a word of either: no close_notify,
// no GOAWAY; with reset, an RST instead of a FIN (SO_LINGER 0), as a proxy killed or a
// connection-tracking table's eviction does.
func (c *h2Conn) dropTCP(reset bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tcp, ok := c.tls.NetConn().(*net.TCPConn); ok && reset {
		_ = tcp.SetLinger(0)
	}
	_ = c.tls.NetConn().Close()
}

// start serves p behind TLS on loopback, h2 only, and returns a client that trusts it.
func (p *h2Proxy) start() *backend.Client {
	t := p.t
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("%s %s over %s reached an h2-only proxy: the client did not negotiate h2", r.Method, r.URL, r.Proto)
		w.WriteHeader(http.StatusHTTPVersionNotSupported)
	}))
	srv.TLS = &tls.Config{NextProtos: []string{"h2"}}
	srv.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
		"h2": func(_ *http.Server, c *tls.Conn, _ http.Handler) { p.serve(c) },
	}
	srv.StartTLS()
	t.Cleanup(func() {
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		srv.Close()
	})
	// A timeout far beyond the test's bound: a poll that ends within the bound learnt of the
	// cut; one that waited for its deadline did not.
	c, err := backend.New(backend.Config{URL: srv.URL, AgentID: "agent-1", CAFile: serverCA(t, srv), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close) // before the server's cleanup (cleanups run last first)
	return c
}

func (p *h2Proxy) serve(tc *tls.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, tc)
	p.mu.Unlock()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(tc, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	c := &h2Conn{tls: tc, fr: http2.NewFramer(tc, tc)}
	c.enc = hpack.NewEncoder(&c.buf)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.write(func(fr *http2.Framer) error { return fr.WriteSettings() })
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.write(func(fr *http2.Framer) error { return fr.WritePing(true, f.Data) })
			}
		case *http2.MetaHeadersFrame:
			if !strings.Contains(f.PseudoValue("path"), "/payloads") {
				p.t.Errorf("unexpected request %s %s", f.PseudoValue("method"), f.PseudoValue("path"))
				continue
			}
			if p.polls.Add(1) != 2 {
				c.answer(f.StreamID)
				continue
			}
			stream := f.StreamID
			time.AfterFunc(p.hold, func() { // held, then cut
				p.cutAt.Store(time.Now().UnixNano())
				p.cut(c, stream)
			})
		}
	}
}

// TestAPollCutOverHTTP2Fails: whichever way an HTTP/2 control plane or a proxy before it cuts
// a poll it held — the TCP connection dropped, a GOAWAY that did or did not take in the poll's
// stream, the stream reset with any code — the poll fails at once as a transport failure (the
// poller learns of the hold and its end: submit.Polled.Held), and no second poll reaches the server
// in its place. Go's HTTP/2 client re-sends a request itself, unseen, after REFUSED_STREAM, a
// PROTOCOL_ERROR from the peer, or a GOAWAY below its stream (http2canRetryError): those fail
// with ErrPollCut, as a re-send over HTTP/1.1 does; the others fail with the cause net/http
// names.
func TestAPollCutOverHTTP2Fails(t *testing.T) {
	const hold = 200 * time.Millisecond // past heldBeforeCut: the poll was held
	rst := func(code http2.ErrCode) func(*h2Conn, uint32) {
		return func(c *h2Conn, s uint32) {
			c.write(func(fr *http2.Framer) error { return fr.WriteRSTStream(s, code) })
		}
	}
	goAway := func(processed bool) func(*h2Conn, uint32) {
		return func(c *h2Conn, s uint32) {
			last := s
			if !processed {
				last = s - 2 // the poll before it (streams from the client are odd)
			}
			c.write(func(fr *http2.Framer) error { return fr.WriteGoAway(last, http2.ErrCodeNo, nil) })
			c.dropTCP(false)
		}
	}
	for _, tc := range []struct {
		name string
		cut  func(*h2Conn, uint32)
		// resent: Go's h2 client would send this poll again on its own (http2canRetryError);
		// the poll must fail with ErrPollCut instead.
		resent bool
	}{
		{"TCP reset", func(c *h2Conn, _ uint32) { c.dropTCP(true) }, false},
		{"TCP closed", func(c *h2Conn, _ uint32) { c.dropTCP(false) }, false},
		{"GOAWAY, the poll processed", goAway(true), false},
		{"GOAWAY, the poll unprocessed", goAway(false), true},
		{"RST_STREAM CANCEL", rst(http2.ErrCodeCancel), false},
		{"RST_STREAM INTERNAL_ERROR", rst(http2.ErrCodeInternal), false},
		{"RST_STREAM REFUSED_STREAM", rst(http2.ErrCodeRefusedStream), true},
		{"RST_STREAM PROTOCOL_ERROR", rst(http2.ErrCodeProtocol), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &h2Proxy{t: t, hold: hold, cut: tc.cut}
			c := p.start()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the test's own bound
			defer cancel()
			if _, err := c.Poll(ctx, 0); err != nil { // the h2 connection is up
				t.Fatalf("the first poll, answered: %v", err)
			}
			_, err := c.Poll(ctx, 0)
			returned := time.Now()
			if err == nil {
				t.Fatalf("a poll held and cut (%s) was answered: %d polls reached the server; want the poll failed and 2", tc.name, p.polls.Load())
			}
			cutAt := p.cutAt.Load()
			if cutAt == 0 {
				t.Fatalf("the poll failed before it was cut: %v", err)
			}
			if d := returned.Sub(time.Unix(0, cutAt)); d > time.Second {
				t.Errorf("the poll failed %v after the cut (%v); want at once, not at its deadline", d, err)
			}
			var pe *backend.PollError
			if !errors.As(err, &pe) || pe.HTTPStatus() != 0 {
				t.Errorf("a cut poll: %v; want a PollError with no status (a transport failure)", err)
			}
			if tc.resent && !errors.Is(err, backend.ErrPollCut) {
				t.Errorf("a cut poll net/http would send again: %v; want ErrPollCut", err)
			}
			t.Logf("%s: %v", tc.name, err)
			// The next poll is answered, and it is the third to reach the server: a re-send of
			// the held poll would have reached it first, on the connection the next poll takes
			// (the one the re-send took: the cut one is closed or no longer taking streams,
			// or, after REFUSED_STREAM, the same one) — frames on one connection come in order.
			if _, err := c.Poll(ctx, 0); err != nil {
				t.Fatalf("the poll after the cut: %v", err)
			}
			if n := p.polls.Load(); n != 3 {
				t.Errorf("%d polls reached the server by the answer to the poll after the cut; want 3 (the held poll not sent again)", n)
			}
		})
	}
}
