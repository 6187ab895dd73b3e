package testrig

// A control plane (engine.ControlPlane) whose answers the test scripts: every report goes to
// Answer and is remembered, so a test can say what was sent and what was settled; every poll
// and acknowledgement goes to the test's script too, so a test can wait on them.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

// ControlPlane answers reports as Answer says (nil: SettleAll), polls with what Payloads says
// (nil: nothing) and acknowledgements as Acks says (nil: taken). Sent and Accepted are read
// after the calls, under no lock of the test's.
type ControlPlane struct {
	Answer   func(changes []protocol.StateChange) protocol.ReportResult
	Payloads func(ctx context.Context, wait time.Duration) ([]protocol.Payload, error)
	Acks     func(ids []string) error
	// Polled, when set, is told the number of each poll (from 1) as it arrives, when it has
	// room: a test that stops listening never holds the poller.
	Polled chan int

	polls    atomic.Int32
	mu       sync.Mutex
	sent     []protocol.StateChange
	accepted map[string]int // change id → times accepted
}

// Poll counts the poll, tells Polled of it and answers as Payloads says.
func (cp *ControlPlane) Poll(ctx context.Context, wait time.Duration) ([]protocol.Payload, error) {
	n := int(cp.polls.Add(1))
	select {
	case cp.Polled <- n:
	default:
	}
	if cp.Payloads == nil {
		return nil, nil
	}
	return cp.Payloads(ctx, wait)
}

// Polls is how many polls have arrived.
func (cp *ControlPlane) Polls() int { return int(cp.polls.Load()) }

// Ack answers as Acks says.
func (cp *ControlPlane) Ack(_ context.Context, ids []string) error {
	if cp.Acks == nil {
		return nil
	}
	return cp.Acks(ids)
}

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

// Once answers the first poll with payloads and holds every later one until the poller cuts
// it, as a control plane with nothing more to say holds a long poll.
func Once(payloads []protocol.Payload) func(context.Context, time.Duration) ([]protocol.Payload, error) {
	var answered atomic.Bool
	return func(ctx context.Context, _ time.Duration) ([]protocol.Payload, error) {
		if !answered.Swap(true) {
			return payloads, nil
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
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
