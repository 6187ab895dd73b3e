package engine

import (
	"context"
	"errors"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// Run is the daemon's loop: it starts the poller and the runtime's exit watcher, then runs
// bursts (doc.go) until ctx ends. It returns after a clean shutdown: the poller and watcher
// stopped, runtime calls in flight finished, agent_stopped journaled. Containers keep
// running: a restart must not kill the workload.
func (e *Engine) Run(ctx context.Context) error {
	if !e.Ready() {
		return errors.New("engine: Run before Recover")
	}
	loopCtx, stopAux := context.WithCancel(context.Background())
	defer stopAux()
	if e.cp != nil {
		e.inbox.wg.Add(1)
		go e.poller(ctx)
	}
	e.inbox.wg.Add(2)
	go e.watchExits(ctx)
	go e.watchHealth(ctx)
	e.Step(loopCtx, nil)
	for {
		var timer <-chan time.Time
		if next := e.NextWake(); !next.IsZero() {
			timer = e.clock.After(max(next.Sub(e.clock.Now()), 0))
		}
		select {
		case in := <-e.inbox.in:
			e.beginBurst(loopCtx)
			e.handle(in)
			// Take what else is waiting, and the outcomes of calls about to end, into the
			// same burst: one decision round and one commit for all of it (linger.go).
			e.drain()
			e.react()
			_, _ = e.endBurst()
		case q := <-e.inbox.queries:
			q.f(e.st)
			close(q.done)
		case <-timer:
			e.Step(loopCtx, nil)
		case <-ctx.Done():
			return e.shutdown(loopCtx)
		}
	}
}

// shutdown lets work in flight finish (its results are dropped: each is re-derived from the
// journal after a restart), journals agent_stopped and returns.
func (e *Engine) shutdown(ctx context.Context) error {
	e.inbox.ready.Store(false)
	e.calls.stopPulls() // a pull may progress for many minutes; it is made again after the restart
	done := make(chan struct{})
	go func() { e.inbox.wg.Wait(); close(done) }()
	// The only burst left is the shutdown's, after the wait group is done: work it started on
	// the executor would outlive Run (its snapshot may plan a compaction), so release drops it.
	e.inbox.stopping = true
	for {
		select {
		case <-done:
			e.keepPlace(ctx)
			e.beginBurst(ctx)
			_ = e.node.Step(e.clock.Now(), fsm.OwnRecord{Event: &event.AgentStopped{Reason: "signal"}})
			_, err := e.endBurst()
			e.log.Info().Uint64("seq", e.st.LastSeq).Msg("agent stopped")
			return err
		case <-e.inbox.in:
		case q := <-e.inbox.queries:
			close(q.done)
		}
	}
}

// Now is the engine clock's time.
func (e *Engine) Now() time.Time { return e.clock.Now() }
