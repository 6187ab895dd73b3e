package backend

import (
	"context"
	"crypto/tls"
	"net"
	"net/http/httptrace"
	"sync"
	"syscall"
	"time"
)

// An answer's arrival is when it reached this host, which on a busy host is well before the
// agent gets to read it: the goroutines that read a connection wait their turn for a CPU like
// every other. The submitter counts a fleet's burst from the arrival of the payloads that
// began it and learns its turn from the arrival of the 429 that named it, so an agent's place
// is where the control plane put it, not where its host's load that second put it (bench
// fleet, 1,000 agents on 2 cores: the stop reached every host within 0.1–0.3 s of the control
// plane writing it, and the agents read it 0.1–3.4 s after — a place learnt from the read was
// off by up to 2 s the next storm, dozens of tokens' worth).
//
// arrival follows one request's connection (httptrace's GotConn) and asks the kernel when it
// last received data (TCP_INFO's last_data_recv, at the kernel's tick: 1–10 ms); at is never
// before the request began nor after the read, so a connection the kernel says nothing of
// (not TCP, another OS, closed under it) gives the read's own time, as before. Data received
// after the answer (the connection back in the pool and taken by the other of the poller and
// the reporter, another HTTP/2 stream) can only make it later, never earlier than the truth.
type arrival struct {
	begun time.Time
	mu    sync.Mutex
	conn  net.Conn
}

// traceArrival follows the request made with the returned context.
func traceArrival(ctx context.Context, begun time.Time) (context.Context, *arrival) {
	a := &arrival{begun: begun}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) {
			a.mu.Lock()
			a.conn = ci.Conn
			a.mu.Unlock()
		},
	}), a
}

// at is when the answer, read whole by now, reached this host.
func (a *arrival) at(now time.Time) time.Time {
	a.mu.Lock()
	conn := a.conn
	a.mu.Unlock()
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return now
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return now
	}
	since, ok := sinceLastReceived(raw)
	if !ok {
		return now
	}
	// since is never negative (the kernel counts it unsigned), so at is never after now.
	if at := now.Add(-since); at.After(a.begun) {
		return at
	}
	return a.begun
}
