package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/agentd/agentd/internal/docker"
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
		e.wg.Add(1)
		go e.poller(ctx)
	}
	e.wg.Add(1)
	go e.watchExits(ctx)
	if hw := healthWatcher(e.rt); hw != nil {
		e.wg.Add(1)
		go e.watchHealth(ctx, hw)
	}
	e.Step(loopCtx, nil)
	for {
		var timer <-chan time.Time
		if next := e.NextWake(); !next.IsZero() {
			timer = e.clock.After(max(next.Sub(e.clock.Now()), 0))
		}
		select {
		case in := <-e.inputs:
			e.beginBurst(loopCtx)
			e.handle(in)
			// Take what else is waiting into the same burst: one decision round and one
			// commit for all of it.
			for n := 0; n < 256; n++ {
				select {
				case in := <-e.inputs:
					e.handle(in)
					continue
				default:
				}
				break
			}
			e.react()
			_, _ = e.endBurst()
		case q := <-e.queries:
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
	e.ready.Store(false)
	e.stopPulls() // a pull may progress for many minutes; it is made again after the restart
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			e.beginBurst(ctx)
			e.record(event.Record{Event: &event.AgentStopped{Reason: "signal"}})
			_, err := e.endBurst()
			e.log.Info().Uint64("seq", e.st.LastSeq).Msg("agent stopped")
			return err
		case <-e.inputs:
		case q := <-e.queries:
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
	if top, ok := e.due.peek(); ok {
		earliest(top.at)
	}
	if e.sub != nil && !e.sub.InFlight() && e.st.OutboxLen() > 0 {
		earliest(e.sub.NextAttempt())
	}
	for _, r := range e.retryAt {
		earliest(r.at) // zero (due) is skipped
	}
	if len(e.dirty) > 0 || len(e.retryExits) > 0 {
		earliest(e.journalRetry)
	}
	if e.reconcilePending && !e.reconciling {
		earliest(e.reconcileAt)
	}
	if e.cfg.Images.Interval > 0 && !e.imagesAsking {
		earliest(e.imagesAt)
	}
	return next
}

// handle hands one input to the core and records its verdict.
func (e *Engine) handle(in Input) {
	now := e.clock.Now()
	switch in := in.(type) {
	case PayloadInput:
		e.handlePayload(now, in)
	case PollInput:
		if e.sub != nil {
			e.sub.Answered(now) // the control plane answers: an outage's backoff is over
			if len(in.Payloads) > 0 {
				e.sub.Assigned(now) // what follows is the fleet's burst, begun now for every agent
			}
		}
		for _, p := range in.Payloads {
			e.handlePayload(now, PayloadInput{Payload: p})
		}
		if in.Done != nil {
			e.burst.done = append(e.burst.done, in.Done)
		}
	case ActionResult:
		e.handleAction(now, in)
	case ExitInput:
		e.handleExit(now, in)
	case HealthInput:
		h := in.Change
		e.record(e.st.Step(now, fsm.HealthObserved{Task: h.Task, Container: h.Container, RuntimeID: h.ID, Health: h.Health}).Records...)
	case ReportInput:
		e.handleReport(now, in)
	case CompactInput:
		e.handleCompact(now, in)
	case ImageSpaceInput:
		e.handleImageSpace(now, in)
	case ReconcileInput:
		e.reconciling = false
		if in.Err != nil {
			e.reconcileTries++
			e.reconcileAt = now.Add(exponential(e.reconcileTries, time.Second, 30*time.Second))
			e.setHealth(HealthRuntime, "not reconciled yet: "+in.Err.Error())
			return
		}
		e.reconcilePending = false
		e.clearHealth(HealthRuntime)
		e.reconciled(now, in.Observed)
		for arn := range e.st.Tasks {
			e.dirty[arn] = true // decisions held back while unreconciled
		}
	}
}

// handlePayload journals a payload's records; the poller acknowledges it once they are
// durable (a duplicate at once: the journal holds it already).
func (e *Engine) handlePayload(now time.Time, in PayloadInput) {
	p := in.Payload
	v := e.st.Step(now, fsm.PayloadArrived{MessageID: p.MessageID, Tasks: p.Tasks, Rules: e.cfg.TaskRules})
	for _, s := range v.Skipped {
		e.log.Warn().Str("message", p.MessageID).Str("problem", s).Msg("skipped")
	}
	if v.Duplicate {
		e.metrics.payloads.WithLabelValues("duplicate").Inc()
	} else if len(v.Records) > 0 {
		e.metrics.payloads.WithLabelValues("journaled").Inc()
	}
	e.record(v.Records...)
	if p.MessageID != "" {
		e.burst.ready.Acks = append(e.burst.ready.Acks, p.MessageID)
	}
	if in.Done != nil {
		e.burst.done = append(e.burst.done, in.Done)
	}
}

// handleExit journals a container's exit from the event stream, once; an exit that came
// before its start was journaled is held until it is.
func (e *Engine) handleExit(now time.Time, in ExitInput) {
	x := in.Exit
	v := e.st.Step(now, exitInput(x))
	if v.Hold {
		e.held[x.ID] = x
		return
	}
	if len(v.Records) > 0 {
		e.record(v.Records...)
		// A fact from outside that nothing re-derives until a restart: should the commit
		// fail, it is handed in again.
		e.burst.exits = append(e.burst.exits, x)
	}
}

// exitInput is the core's input for an exit from the runtime's stream.
func exitInput(x docker.Exit) fsm.ContainerExited {
	return fsm.ContainerExited{Task: x.Task, Container: x.Container, RuntimeID: x.ID, ExitCode: x.ExitCode, OOMKilled: x.OOMKilled, Cursor: x.Cursor}
}

func (e *Engine) handleCompact(now time.Time, in CompactInput) {
	e.compacting = false
	if in.Err != nil {
		e.log.Warn().Err(in.Err).Msg("compaction failed; the next snapshot tries again")
		return
	}
	// Lost with a failed commit, the next compaction repeats it (the records are gone already).
	e.record(e.st.Step(now, fsm.CompactionFinished{Done: in.Done}).Records...)
	e.metrics.droppedEarly.Add(float64(len(in.Done.Early)))
	e.log.Info().Int("records", in.Done.Records).Int("tasks", len(in.Done.Tasks)).Int("messages", len(in.Done.Messages)).Int("histories_dropped_early", len(in.Done.Early)).Msg("journal compacted")
}

// react decides until nothing more follows from the journal alone: the core's records are
// applied at once; runtime actions and the next report go into the burst's Ready.
func (e *Engine) react() {
	now := e.clock.Now()
	for top, ok := e.due.peek(); ok && !top.at.After(now); top, ok = e.due.peek() {
		e.due.pop()
		e.dirty[top.arn] = true
	}
	for key, r := range e.retryAt {
		if !r.at.IsZero() && !r.at.After(now) {
			e.dirty[key.Task] = true
			r.at = time.Time{} // due: dispatch may go; tries keep counting
			e.retryAt[key] = r
		}
	}
	if len(e.retryExits) > 0 && !e.journalRetry.After(now) {
		exits := e.retryExits
		e.retryExits = nil
		for _, x := range exits {
			e.handleExit(now, ExitInput{Exit: x})
		}
	}
	for round := 0; (len(e.dirty) > 0 || len(e.released) > 0) && round < 64; round++ {
		for len(e.released) > 0 {
			x := e.released[0]
			e.released = e.released[1:]
			e.handleExit(now, ExitInput{Exit: x})
		}
		arns := e.sortedDirty()
		if len(arns) == 0 {
			continue // Decide with no tasks named would decide for all of them
		}
		d := e.st.Decide(now, e.fcfg, arns...)
		e.record(d.Records...)
		for _, a := range d.Actions {
			e.dispatch(now, a)
		}
		for _, w := range d.Wakes {
			e.scheduleWake(w)
		}
	}
	if e.reconcilePending && !e.reconciling && !e.reconcileAt.After(now) {
		e.reconciling = true
		e.onDrop(func() { e.reconciling = false })
		e.burst.ready.Reconcile = e.probes()
		if e.burst.ready.Reconcile == nil {
			e.burst.ready.Reconcile = []probe{}
		}
	}
	if e.imageCycleDue(now) {
		e.burst.ready.ImageSpace = true
	}
	e.report(now)
	e.metrics.update(e)
}

// afterApply keeps the engine's bookkeeping in step with the projection: held exits go
// where the core says (fsm.State.HeldExitAfter).
func (e *Engine) afterApply(r event.Record) {
	if r.Task != "" {
		e.dirty[r.Task] = true
	}
	for id, x := range e.held {
		switch e.st.HeldExitAfter(r, exitInput(x)) {
		case fsm.HandIn:
			delete(e.held, id)
			e.released = append(e.released, x)
		case fsm.DropHeld:
			delete(e.held, id) // its start was never journaled and never will be
		}
	}
	switch ev := r.Event.(type) {
	case *event.TaskAdded:
		e.log.Info().Str("task", r.Task).Str("desired", string(ev.Desired)).Msg("task assigned")
	case *event.TaskRejected:
		e.log.Warn().Str("task", r.Task).Str("problem", ev.Reason).Msg("invalid task recorded STOPPED")
	case *event.StoppedAcked:
		if t := e.st.Tasks[r.Task]; t != nil {
			e.scheduleCleanup(t)
			e.metrics.blockedOnAck.Observe(r.Time.Sub(t.StoppedAt).Seconds())
		}
	case *event.CleanupStarted:
		e.log.Info().Str("task", r.Task).Msg("cleanup started")
	case *event.TaskCleaned:
		e.metrics.cleanups.Inc()
		e.log.Info().Str("task", r.Task).Msg("task cleaned")
		// What the engine kept about the task goes with it: backoffs of calls it no longer
		// needs (held exits: above).
		for k := range e.retryAt {
			if k.Task == r.Task {
				delete(e.retryAt, k)
			}
		}
		delete(e.wakes, r.Task)
	case *event.TaskTransitioned:
		e.log.Info().Str("task", r.Task).Str("from", string(ev.From)).Str("to", string(ev.To)).Str("reason", ev.Reason).Msg("task transitioned")
	}
}

// scheduleCleanup puts a STOPPED_ACKED task's cleanup deadline (from its journaled stop time,
// plus jitter so tasks stopped together are not cleaned in one storm) in the heap.
func (e *Engine) scheduleCleanup(t *fsm.Task) {
	due := t.CleanupDue(e.fcfg)
	if e.cfg.CleanupJitter > 0 {
		due = due.Add(time.Duration(e.rng.Int64N(int64(e.cfg.CleanupJitter))))
	}
	e.due.push(dueEntry{at: due, arn: t.ARN})
}

// scheduleWake puts a time at which the core's decisions for a task change by time alone (a
// dependency's start_timeout_s running out, counted from the task's journaled arrival) in the
// heap. Decide asks for the same wake each time it looks at the task: it is pushed once.
// A restart pushes it again from the first decisions after recovery, which cover every task.
func (e *Engine) scheduleWake(w fsm.Wake) {
	if at, ok := e.wakes[w.Task]; ok && at.Equal(w.At) {
		return
	}
	e.wakes[w.Task] = w.At
	e.due.push(dueEntry{at: w.At, arn: w.Task})
}

// Now is the engine clock's time.
func (e *Engine) Now() time.Time { return e.clock.Now() }

// sortedDirty drains the dirty set in ARN order (determinism), leaving out quarantined tasks:
// nothing more is decided for them (quarantine.go).
func (e *Engine) sortedDirty() []string {
	out := make([]string, 0, len(e.dirty))
	for a := range e.dirty {
		if e.quarantined[a] == "" {
			out = append(out, a)
		}
	}
	clear(e.dirty)
	slices.Sort(out)
	return out
}
