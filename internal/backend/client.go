// Package backend is the agent's HTTP client for the control plane (PROTOCOL.md): long-polling
// payloads, acknowledging them, reporting state changes.
//
// It promises that every call has a timeout and honours its context; that every request
// carries the bearer token read from the token file, re-read when the file changes, so a
// rotated token needs no restart; and that an answer is classified exactly as the protocol
// says, never settling anything that a 200 did not list.
package backend

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/datadir"
	"github.com/agentd/agentd/internal/protocol"
)

// Config says where the control plane is and how to talk to it.
type Config struct {
	URL       string        // --backend: http:// or https://
	AgentID   string        // {agent} in every path
	TokenFile string        // --token-file
	CAFile    string        // --ca-file: extra roots for an https backend
	Timeout   time.Duration // per call, beyond a poll's wait (default 10 s)
	// AllowPlainToken (--allow-plain-token) lets the token go over http:// to a host that is
	// not loopback; without it such a backend is refused.
	AllowPlainToken bool
}

// Client talks to one control plane as one agent.
type Client struct {
	base    *url.URL
	agent   string
	token   *tokenFile
	http    *http.Client
	timeout time.Duration
}

// New checks the configuration and builds a client. Errors name the flag at fault.
func New(cfg Config) (*Client, error) {
	u, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.AgentID == "" {
		return nil, errors.New("backend: no agent id")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 4
	if cfg.CAFile != "" {
		pem, err := datadir.ReadTrusted(cfg.CAFile, datadir.CABundleLimit)
		if err != nil {
			return nil, fmt.Errorf("--ca-file %s: %w", cfg.CAFile, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificates in it", cfg.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	} else {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tf := &tokenFile{path: cfg.TokenFile}
	if cfg.TokenFile != "" {
		if _, err := tf.get(); err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
	}
	if err := checkPlainToken(u, cfg.TokenFile, cfg.AllowPlainToken); err != nil {
		return nil, err
	}
	return &Client{base: u, agent: cfg.AgentID, token: tf, http: &http.Client{Transport: tr, CheckRedirect: noRedirects}, timeout: cfg.Timeout}, nil
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

func (c *Client) url(path string) string {
	return strings.TrimRight(c.base.String(), "/") + "/v1/agents/" + url.PathEscape(c.agent) + path
}

func (c *Client) do(ctx context.Context, method, path string, body any, timeout time.Duration) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	req, err := http.NewRequestWithContext(ctx, method, c.url(path), rd)
	if err != nil {
		cancel()
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tok, err := c.token.get()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelBody) Close() error { err := b.ReadCloser.Close(); b.cancel(); return err }

// PollError is a poll that failed: the cause says whether the answer was not JSON, too large,
// refused or never came. A poll error is never a payload error.
type PollError struct {
	Status int
	Err    error
}

func (e *PollError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("poll: HTTP %d: %v", e.Status, e.Err)
	}
	return "poll: " + e.Err.Error()
}

func (e *PollError) Unwrap() error { return e.Err }

// HTTPStatus is the answer's status (0 when no answer came).
func (e *PollError) HTTPStatus() int { return e.Status }

// ErrPollCut is a poll's failure when the control plane held it and cut it without an answer
// in a way net/http answers by sending the poll again, unseen — over HTTP/1.1 a kept-alive
// connection closed (a GET is replayable), over HTTP/2 the stream refused (REFUSED_STREAM), a
// PROTOCOL_ERROR from the peer, or a GOAWAY that left the poll's stream out (Go's
// http2canRetryError) — so the poller would never learn that a hanging control plane held the
// poll and cut it at its return (bench fleet's hanging outage: every agent whose poll was held
// in it saw nothing). Every other cut over HTTP/2 (the TCP connection dropped, a GOAWAY that
// took the stream in, RST_STREAM CANCEL or INTERNAL_ERROR) is not re-sent by net/http, and
// the poll fails with the cause it names (TestAPollCutOverHTTP2Fails).
var ErrPollCut = errors.New("the control plane held the poll and cut it without an answer")

// heldBeforeCut is how long a poll must have been on its way since its first connection before
// the transport asked for a connection for it again (it is sending it again) for the poll to
// count as cut (ErrPollCut); a connection found closed as the poll went out (the server
// dropped it idle, or an HTTP/2 connection turned out unusable) is left to net/http, which
// sends the poll again. The time includes net/http's own wait between HTTP/2 attempts (1 s
// before the third, doubling up to a minute in all): a poll whose stream is refused at once
// twice fails with ErrPollCut a second later rather than being retried for that minute.
const heldBeforeCut = 100 * time.Millisecond

// Poll long-polls for payloads, waiting at most wait on the server side. A poll the control
// plane held and cut without an answer fails (ErrPollCut) rather than being sent again.
func (c *Client) Poll(ctx context.Context, wait time.Duration) ([]protocol.Payload, error) {
	secs := int(wait.Seconds())
	secs = min(max(secs, 0), protocol.MaxWaitSeconds)
	ctx, cut := context.WithCancelCause(ctx)
	defer cut(nil)
	var sentAt atomic.Int64 // when the poll got its first connection (unix ns), 0 before
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { sentAt.CompareAndSwap(0, time.Now().UnixNano()) },
		// The transport asks for a connection again: the poll ended before an answer and it is
		// sending the poll again. Over HTTP/2 this fires for every attempt too, also one on the
		// same connection (after REFUSED_STREAM; Go's h2 pool calls GetConn for each attempt it
		// gives a cached connection), and before the attempt's HEADERS are written, which a
		// cancelled context stops — so a re-sent poll never reaches the server. The hold is
		// measured to this moment, not to when the next connection is ready: a new one's
		// handshake (a TLS round trip or two across a WAN, a slow resolver) is no part of it,
		// and counting it made an idle connection's close crossing the poll a cut poll.
		GetConn: func(string) {
			if first := sentAt.Load(); first != 0 && time.Duration(time.Now().UnixNano()-first) >= heldBeforeCut {
				cut(ErrPollCut)
			}
		},
	})
	ctx, arrived := traceArrival(ctx, time.Now())
	resp, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/payloads?wait=%d", secs), nil, time.Duration(secs)*time.Second+c.timeout)
	if err != nil {
		if errors.Is(context.Cause(ctx), ErrPollCut) {
			err = ErrPollCut
		}
		return nil, &PollError{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, &PollError{Status: resp.StatusCode, Err: fmt.Errorf("%s", strings.TrimSpace(string(b)))}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, protocol.MaxPollBody+1))
	if err != nil {
		return nil, &PollError{Status: resp.StatusCode, Err: fmt.Errorf("reading the answer: %w", err)}
	}
	if len(b) > protocol.MaxPollBody {
		return nil, &PollError{Status: resp.StatusCode, Err: fmt.Errorf("answer over %d bytes", protocol.MaxPollBody)}
	}
	var pr protocol.PollResponse
	if err := json.Unmarshal(b, &pr); err != nil {
		return nil, &PollError{Status: resp.StatusCode, Err: fmt.Errorf("answer is not JSON: %w", err)}
	}
	at := arrived.at(time.Now())
	for i := range pr.Payloads {
		pr.Payloads[i].ReceivedAt = at
	}
	return pr.Payloads, nil
}

// Ack acknowledges payloads, which the caller has journaled.
func (c *Client) Ack(ctx context.Context, ids []string) error {
	resp, err := c.do(ctx, http.MethodPost, "/acks", protocol.AcksRequest{MessageIDs: ids}, c.timeout)
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("ack: HTTP %d", resp.StatusCode)
	}
	return nil
}

// Report sends state changes and classifies the answer. A report the protocol does not allow
// is not sent: none (nothing to report) or a body over protocol.MaxRequestBody, which is
// answered here as the control plane would, with 413, so the submitter splits it.
func (c *Client) Report(ctx context.Context, changes []protocol.StateChange) protocol.ReportResult {
	if len(changes) == 0 {
		return protocol.ReportResult{Outcome: protocol.BadRequest, Err: errors.New("no changes to report: not sent")}
	}
	body, err := json.Marshal(protocol.StateChangesRequest{Changes: changes})
	if err != nil {
		return protocol.ReportResult{Outcome: protocol.BadRequest, Err: fmt.Errorf("encoding the report: %w", err)}
	}
	if len(body) > protocol.MaxRequestBody {
		return protocol.ReportResult{Outcome: protocol.TooLarge, HTTPStatus: http.StatusRequestEntityTooLarge,
			Err: fmt.Errorf("report of %d changes is %d bytes, over %d: not sent", len(changes), len(body), protocol.MaxRequestBody)}
	}
	ctx, arrived := traceArrival(ctx, time.Now())
	resp, err := c.do(ctx, http.MethodPost, "/state-changes", json.RawMessage(body), c.timeout)
	if err != nil {
		return protocol.ReportResult{Outcome: protocol.Network, Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return protocol.ReportResult{Outcome: protocol.Network, HTTPStatus: resp.StatusCode, Err: fmt.Errorf("reading the answer: %w", err)}
	}
	now := time.Now()
	r := protocol.ClassifyReport(resp.StatusCode, resp.Header.Get("Retry-After"), b, now)
	r.ReceivedAt = arrived.at(now)
	return r
}

// tokenFile reads the bearer token, again whenever the file's size, modification or change
// time changes (a chmod, or a link swapped in, is a change). The token lets its holder poll
// this agent's payloads — every task's env values, sent in the clear — so the file gets the
// seal key's checks on every read (datadir.ReadPrivate: the agent's own, 0600, not a link,
// never blocking, bounded).
type tokenFile struct {
	path string

	mu    sync.Mutex
	stamp [3]int64 // size, mtime, ctime (ns) of the file last read
	token string
}

// tokenFileLimit bounds the token file: a bearer token is short.
const tokenFileLimit = 64 << 10

func (t *tokenFile) get() (string, error) {
	if t.path == "" {
		return "", nil
	}
	st, err := os.Lstat(t.path)
	if err != nil {
		return "", err
	}
	stamp := [3]int64{st.Size(), st.ModTime().UnixNano(), 0}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		stamp[2] = sys.Ctim.Nano()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if stamp == t.stamp && t.token != "" {
		return t.token, nil
	}
	b, _, err := datadir.ReadPrivate(t.path, tokenFileLimit)
	if err != nil {
		return "", fmt.Errorf("%s: %w", t.path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s is empty", t.path)
	}
	t.token, t.stamp = tok, stamp
	return tok, nil
}
