package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/failpoint"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// Ready is what one burst journaled and released: the node's Ready (fsm.Ready) as the engine
// carried it out — the records committed, then the effects in the order they were released
// (doc.go), with the report the submitter chose. Step returns it after the commit, with Err
// set (and no effects) if the commit failed.
type Ready struct {
	Records []event.Record         // journaled in one commit, in this order
	Report  []protocol.StateChange // the next state-change request (none: nothing to send now)
	Acks    []string               // payloads (message ids) answered as journaled: the poller acknowledges them
	Actions []fsm.Action           // runtime calls
	Compact *CompactionPlan        // a compaction to run
	// ImageSpace asks the runtime how full its disk is, for an image collection cycle.
	ImageSpace bool
	// Reconcile asks the runtime again what it holds (non-nil: ask), after it did not
	// answer at recovery: the containers to probe beyond its list.
	Reconcile []fsm.Probe
	// Withheld are the actions a single-goroutine driver kept back (Withhold): never made,
	// their tasks decided again.
	Withheld []fsm.ActionKey
	Err      error // the commit failed: nothing was released
}

// String lists the Ready one item a line, for scripts and logs.
func (r Ready) String() string {
	var b strings.Builder
	if r.Err != nil {
		fmt.Fprintf(&b, "commit failed: %v\n", r.Err)
	}
	if len(r.Report) > 0 {
		ids := make([]string, len(r.Report))
		for i, c := range r.Report {
			ids[i] = c.ID
		}
		fmt.Fprintf(&b, "report %s\n", strings.Join(ids, ","))
	}
	for _, m := range r.Acks {
		fmt.Fprintf(&b, "ack %s\n", m)
	}
	for _, a := range r.Actions {
		fmt.Fprintf(&b, "act %s\n", a.Key())
	}
	for _, k := range r.Withheld {
		fmt.Fprintf(&b, "withheld %s\n", k)
	}
	if r.Compact != nil {
		fmt.Fprintf(&b, "compact up to %d: %d tasks, %d messages\n", r.Compact.UpTo, len(r.Compact.Tasks), len(r.Compact.Messages))
	}
	if r.ImageSpace {
		b.WriteString("ask the runtime's disk space (image collection)\n")
	}
	if r.Reconcile != nil {
		fmt.Fprintf(&b, "reconcile (%d containers to probe)\n", len(r.Reconcile))
	}
	return b.String()
}

// burst is one round of the loop (see doc.go): the payloads waiting for its acknowledgements,
// and whether it may send the next report.
type burst struct {
	waiting []waiting       // payloads of the burst, answered by its Acks once the commit returned
	reports bool            // the burst decided (react): it may send the next report
	ctx     context.Context // for the commit
}

// waiting is a poller's payloads awaiting their answer: nil once every one of them is among
// the burst's Acks.
type waiting struct {
	ids  []string // message ids ("" for a payload without one)
	done chan<- error
}

func (e *Engine) beginBurst(ctx context.Context) { e.burst = &burst{ctx: ctx} }

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

// react ends a burst's inputs with the node's Tick: what the engine's timers found due goes
// in, and the node decides until nothing more follows from the journal alone.
func (e *Engine) react() {
	now := e.clock.Now()
	e.releaseIfIdle(now)
	_ = e.node.Step(now, fsm.Tick{Due: e.sched.takeDue(now), AskRuntime: e.recon.due(now), JournalOpen: !e.sched.journalRetry.After(now)})
	e.burst.reports = true // the report is chosen once the commit returns (endBurst)
	e.metrics.update(e)
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
	earliest(e.node.NextWake()) // backoffs ending, the next image cycle
	if e.node.Waiting() {
		earliest(e.sched.journalRetry)
	}
	earliest(e.recon.next())
	earliest(e.mem.due(len(e.st.Tasks)))
	return next
}

// endBurst takes the node's Ready, keeps its deadlines and commits its records in one append
// — with the snapshot, when one is due — then, once the commit has returned, chooses the
// report from the durable outbox, tells the node what was released (Advance) and releases it
// in the fixed order. If the commit fails it drops the effects — the node made none of them
// count — rebuilds the projection from the journal and returns the error.
func (e *Engine) endBurst() (Ready, error) {
	b := e.burst
	snap := e.snapshotIfDue()
	e.burst = nil
	nr := e.node.Ready()
	e.observeRecords(nr)
	e.keepWakes(nr.Wakes)
	ready := Ready{Records: nr.Records}
	if len(ready.Records) > 0 {
		start := time.Now()
		var err error
		if snap != nil {
			_, err = e.j.AppendPackedSnapshot(b.ctx, snap.at, snap.data, ready.Records...)
		} else {
			_, err = e.j.Append(b.ctx, ready.Records...)
		}
		took := time.Since(start)
		e.metrics.commitLatency.Observe(took.Seconds())
		e.linger.committed(took)
		if err != nil {
			e.dropBurst(b, len(ready.Records), err)
			return Ready{Records: ready.Records, Err: err}, err
		}
		e.clearHealth(HealthJournal)
		e.metrics.appends.Add(float64(len(ready.Records)))
		failpoint.Hit("engine-after-commit-before-apply") // durable; nothing acted on yet
		e.neverStarted(ready.Records)
	}
	e.mem.observe(e.clock.Now(), len(e.st.Tasks), len(ready.Records) > 0)
	if snap != nil {
		e.upkeep.snapSeq = snap.at
		e.log.Debug().Uint64("at", snap.at).Int("stored_bytes", len(snap.data)).Msg("snapshot stored")
		ready.Compact = e.planCompaction()
	}
	if b.reports {
		ready.Report = e.report(e.clock.Now())
	}
	ready.Acks, ready.ImageSpace, ready.Reconcile = nr.Acks, nr.ImageSpace, nr.Reconcile
	for _, a := range nr.Actions {
		if e.withhold[a.Key()] || e.inbox.stopping {
			ready.Withheld = append(ready.Withheld, a.Key())
			continue
		}
		ready.Actions = append(ready.Actions, a)
	}
	clear(e.withhold)
	_ = e.node.Step(e.clock.Now(), fsm.Advance{Withheld: ready.Withheld})
	if ready.Reconcile != nil {
		e.recon.asked()
	}
	e.publishBacklog() // before the poller is answered: it reads it before its next poll
	e.release(ready, b.waiting)
	return ready, nil
}

// observeRecords tells the log and metrics what a burst's records, notes and dropped records
// say, and lets go of what the engine kept for a cleaned task.
func (e *Engine) observeRecords(r fsm.Ready) {
	health := len(r.Dropped) > 0
	for _, d := range r.Dropped {
		e.dropped(d)
	}
	for _, x := range r.Notes {
		e.noted(x)
	}
	for _, rec := range r.Records {
		switch ev := rec.Event.(type) {
		case *event.TaskAdded:
			health = health || len(e.st.Refusals) > 0 // a task a refusal named "never run" may be this one, sent again
			e.log.Info().Str("task", rec.Task).Str("desired", string(ev.Desired)).Msg("task assigned")
		case *event.TaskRejected:
			health = health || len(e.st.Refusals) > 0
			e.log.Warn().Str("task", rec.Task).Str("problem", ev.Reason).Msg("invalid task recorded STOPPED")
		case *event.StoppedAcked:
			if t := e.st.Tasks[rec.Task]; t != nil {
				e.metrics.blockedOnAck.Observe(rec.Time.Sub(t.StoppedAt).Seconds())
			}
		case *event.CleanupStarted:
			e.log.Info().Str("task", rec.Task).Msg("cleanup started")
		case *event.TaskCleaned:
			e.metrics.cleanups.Inc()
			e.log.Info().Str("task", rec.Task).Msg("task cleaned")
			e.calls.forget(rec.Task) // backoffs of calls it no longer needs
		case *event.TaskTransitioned:
			e.log.Info().Str("task", rec.Task).Str("from", string(ev.From)).Str("to", string(ev.To)).Str("reason", ev.Reason).Msg("task transitioned")
		}
	}
	if health {
		e.coreHealth()
	}
}

// dropBurst handles a failed commit: the effects never leave (the node counts none of them),
// the payloads are answered with the error (not acknowledged), and the projection is rebuilt
// from the journal; the node keeps the burst's exits to hand in again.
func (e *Engine) dropBurst(b *burst, records int, err error) {
	e.setHealth(HealthJournal, err.Error())
	e.metrics.journalErrors.Inc()
	e.log.Error().Err(err).Int("records", records).Msg("burst not journaled; its effects are dropped and the projection rebuilt from the journal")
	e.metrics.payloads.WithLabelValues("journal_failed").Add(float64(len(b.waiting)))
	for _, w := range b.waiting {
		w.done <- err
	}
	e.sched.journalRetry = e.clock.Now().Add(time.Second)
	l, lerr := Load(e.j, 0)
	if lerr != nil {
		e.log.Error().Err(lerr).Msg("cannot rebuild the projection from the journal")
		_ = e.node.Step(e.clock.Now(), fsm.Advance{Err: err})
		return
	}
	e.st = l.State
	e.sched.reset()
	_ = e.node.Step(e.clock.Now(), fsm.Advance{Err: err, Reload: l.State}) // every task decided again
	e.coreHealth()                                                         // refusals of the burst that failed are gone with it
	e.scheduleCleanups()
}

// release starts a durable burst's effects in the order doc.go states, one Ready field after
// the other: the report, then the acknowledgements (the payloads whose ids are all among
// Acks are answered, and the poller acknowledges them), then runtime actions, then the
// compaction and the questions of the runtime (its disk space, what it holds).
func (e *Engine) release(r Ready, payloads []waiting) {
	if e.inbox.stopping {
		r = Ready{Acks: r.Acks} // Run is past its wait group: the payloads are answered, nothing starts
	}
	if len(r.Report) > 0 {
		e.exec.Go(e.sendReport(r.Report))
	}
	var acked map[string]bool
	if len(payloads) > 0 {
		acked = make(map[string]bool, len(r.Acks))
		for _, m := range r.Acks {
			acked[m] = true
		}
	}
	for _, w := range payloads {
		var err error
		for _, id := range w.ids {
			if id != "" && !acked[id] {
				err = fmt.Errorf("payload %s: journaled but not acknowledged", id)
			}
		}
		w.done <- err
	}
	for _, a := range r.Actions {
		e.linger.started(a.Kind) // out now: a burst may wait for its outcome (linger.go)
		if se, ok := e.exec.(slowExecutor); ok && a.Kind == fsm.ActPull {
			se.GoSlow(e.runtimeCall(a))
			continue
		}
		e.exec.Go(e.runtimeCall(a))
	}
	if r.Compact != nil {
		e.exec.Go(e.compaction(*r.Compact))
	}
	if r.ImageSpace {
		e.exec.Go(e.askImageSpace())
	}
	if r.Reconcile != nil {
		rt, probes := e.rt, r.Reconcile
		e.exec.Go(func() Input {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			observed, err := observe(ctx, rt, probes)
			return ReconcileInput{Observed: observed, Err: err}
		})
	}
}
