package engine

import (
	"context"
	"errors"
	"time"

	"github.com/agentd/agentd/internal/event"
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
			e.record(event.Record{Event: &event.AgentStopped{Reason: "signal"}})
			_, err := e.endBurst()
			e.log.Info().Uint64("seq", e.st.LastSeq).Msg("agent stopped")
			return err
		case <-e.inbox.in:
		case q := <-e.inbox.queries:
			close(q.done)
		}
	}
}

// Step runs one burst for one input (nil: only what time makes due) and returns what it
// journaled and released: the single-goroutine driver's entry (tests, simulation, scripts)
// and the loop's for timer wakes.
func (e *Engine) Step(ctx context.Context, in Input) Ready {
	e.beginBurst(ctx)
	if in != nil {
		e.handle(in)
	}
	e.react()
	r, _ := e.endBurst()
	return r
}

// NextWake is when the engine next has something to do by time alone (zero: nothing).
func (e *Engine) NextWake() time.Time {
	var next time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if top, ok := e.sched.due.peek(); ok {
		earliest(top.at)
	}
	if e.sub != nil && !e.sub.InFlight() && e.st.OutboxLen() > 0 {
		earliest(e.sub.NextAttempt())
	}
	earliest(e.calls.next())
	if len(e.sched.dirty) > 0 || len(e.exits.refused) > 0 {
		earliest(e.sched.journalRetry)
	}
	earliest(e.recon.next())
	earliest(e.mem.due(len(e.st.Tasks)))
	if e.cfg.Images.Interval > 0 && !e.images.asking {
		earliest(e.images.at)
	}
	return next
}

// react decides until nothing more follows from the journal alone: the core's records are
// applied at once; runtime actions and the questions of the runtime go into the burst's
// Ready, and the burst may report once its commit returns.
func (e *Engine) react() {
	now := e.clock.Now()
	e.releaseIfIdle(now)
	e.sched.takeDue(now)
	e.calls.takeDue(now, e.sched.mark)
	e.handleRefusedExits(now)
	for round := 0; (len(e.sched.dirty) > 0 || len(e.exits.released) > 0) && round < 64; round++ {
		for x, ok := e.exits.next(); ok; x, ok = e.exits.next() {
			e.handleExit(now, ExitInput{Exit: x})
		}
		arns := e.sortedDirty()
		if len(arns) == 0 {
			continue // Decide with no tasks named would decide for all of them
		}
		d := e.st.Decide(now, e.fcfg(), arns...)
		e.record(d.Records...)
		for _, a := range d.Actions {
			e.dispatch(now, a)
		}
		for _, w := range d.Wakes {
			e.sched.wake(w)
		}
	}
	if e.recon.due(now) {
		e.burst.ready.Reconcile = e.probes()
		if e.burst.ready.Reconcile == nil {
			e.burst.ready.Reconcile = []Probe{}
		}
	}
	if e.imageCycleDue(now) {
		e.burst.ready.ImageSpace = true
	}
	e.burst.reports = true // the report is chosen once the commit returns (endBurst)
	e.metrics.update(e)
}

// Now is the engine clock's time.
func (e *Engine) Now() time.Time { return e.clock.Now() }
