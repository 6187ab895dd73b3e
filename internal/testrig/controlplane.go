package testrig

// A control plane (engine.ControlPlane) whose answers the test scripts: every report goes to
// Answer and is remembered, so a test can say what was sent and what was settled.

import (
	"context"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

// ControlPlane answers reports as Answer says (nil: SettleAll) and polls with what Payloads
// says (nil: nothing). Sent and Accepted are read after the calls, under no lock of the test's.
type ControlPlane struct {
	Answer   func(changes []protocol.StateChange) protocol.ReportResult
	Payloads func(ctx context.Context, wait time.Duration) ([]protocol.Payload, error)

	mu       sync.Mutex
	sent     []protocol.StateChange
	accepted map[string]int // change id → times accepted
}

// Poll answers as Payloads says.
func (cp *ControlPlane) Poll(ctx context.Context, wait time.Duration) ([]protocol.Payload, error) {
	if cp.Payloads == nil {
		return nil, nil
	}
	return cp.Payloads(ctx, wait)
}

// Ack takes every acknowledgement.
func (cp *ControlPlane) Ack(context.Context, []string) error { return nil }

// Report answers as Answer says and remembers what was sent and accepted.
func (cp *ControlPlane) Report(_ context.Context, changes []protocol.StateChange) protocol.ReportResult {
	answer := cp.Answer
	if answer == nil {
		answer = SettleAll
	}
	r := answer(changes)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.sent = append(cp.sent, changes...)
	if cp.accepted == nil {
		cp.accepted = map[string]int{}
	}
	for _, id := range r.Accepted {
		cp.accepted[id]++
	}
	return r
}

// Sent is every change reported, in order.
func (cp *ControlPlane) Sent() []protocol.StateChange {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]protocol.StateChange(nil), cp.sent...)
}

// Accepted is how many times each change id was accepted.
func (cp *ControlPlane) Accepted() map[string]int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make(map[string]int, len(cp.accepted))
	for id, n := range cp.accepted {
		out[id] = n
	}
	return out
}

// Forget forgets what was sent and accepted so far.
func (cp *ControlPlane) Forget() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.sent, cp.accepted = nil, nil
}

// SettleAll accepts every change at once.
func SettleAll(changes []protocol.StateChange) protocol.ReportResult {
	r := protocol.ReportResult{Outcome: protocol.Settled, HTTPStatus: 200}
	for _, c := range changes {
		r.Accepted = append(r.Accepted, c.ID)
	}
	return r
}

// Throttle answers every report 429 with Retry-After 1 s.
func Throttle([]protocol.StateChange) protocol.ReportResult {
	return protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: time.Second}
}
