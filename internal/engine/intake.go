package engine

import (
	"context"
	"time"
)

// intake keeps what a burst of assignments costs bounded by what the agent can finish, not by
// the backlog the control plane holds (issue 25). Tasks that ran and stopped wait for one of
// CleanupWorkers removal slots, each a runtime call and a commit; the control plane answers
// each poll with up to 50 new tasks at once. With 20,000 short tasks posted together the agent
// took them in far faster than it removed their containers: 16,666 tasks at once waited to be
// cleaned, each held whole in the projection (and by the runtime), and the agent's peak RSS
// was 2.3x its RSS at rest. So while IntakeBacklog tasks or more wait for a removal slot the
// poller holds its next poll until the queue falls under the bound — the tasks stay with the
// control plane, which keeps every payload until it is acknowledged — for at most
// IntakeHoldMax: a runtime that has stopped removing must not stop the agent hearing of new
// tasks and stops for long, so intake is slowed to a poll per IntakeHoldMax, never cut. A
// host whose tasks run long, or wait out --cleanup-wait, never queues removals, and is never
// held.

// publishBacklog tells the poller, at a burst's end, how many tasks wait for a removal slot,
// and wakes it if it holds a poll and the queue is under the bound now.
func (e *Engine) publishBacklog() {
	n := int64(e.node.RemovalBacklog())
	e.inbox.backlog.Store(n)
	if n < int64(e.cfg.IntakeBacklog) {
		select {
		case e.inbox.drained <- struct{}{}:
		default:
		}
	}
}

// holdIntake waits, before a poll, while the removal queue is over the bound: until a burst
// finds it under, ctx ends, or IntakeHoldMax has passed. It waits in wall time: it paces the
// runtime's work, and decides nothing the journal records.
func (e *Engine) holdIntake(ctx context.Context) {
	if e.inbox.backlog.Load() < int64(e.cfg.IntakeBacklog) {
		return
	}
	e.metrics.intakeHolds.Inc()
	deadline := time.NewTimer(e.cfg.IntakeHoldMax)
	defer deadline.Stop()
	for e.inbox.backlog.Load() >= int64(e.cfg.IntakeBacklog) {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-e.inbox.drained:
		}
	}
}
