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
	"github.com/agentd/agentd/internal/runtime"
)

// Ready is what one burst decided, as plain data: the records to journal, then the effects
// they allow, in the order they are released (doc.go). Nothing in it has happened yet when
// it is made, and nothing about its effects is recorded before its commit returns; Step
// returns it after the commit, with Err set (and no effects) if the commit failed.
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
	Reconcile []Probe
	Err       error // the commit failed: nothing was released
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

// burst is one round of the loop (see doc.go): the Ready being made, the payloads waiting
// for its acknowledgements, and the calls it decided, in a layer over what is out.
type burst struct {
	ready   Ready
	next    uint64          // the sequence number the next record gets
	waiting []waiting       // payloads of the burst, answered by its Acks once the commit returned
	exits   []runtime.Exit  // exits journaled in this burst, handed in again if the commit fails
	out     fsm.InFlight    // the calls decided in this burst over those out (fsm.Over)
	reports bool            // the burst decided (react): it may send the next report
	ctx     context.Context // for the commit
}

// waiting is a poller's payloads awaiting their answer: nil once every one of them is among
// the burst's Acks.
type waiting struct {
	ids  []string // message ids ("" for a payload without one)
	done chan<- error
}

// beginBurst opens a burst. The loop is the only appender, so it numbers records itself and
// the journal checks the numbers on Append.
func (e *Engine) beginBurst(ctx context.Context) {
	e.burst = &burst{next: e.j.LastSeq() + 1, ctx: ctx, out: fsm.Over(&e.calls.out)}
}

// inFlight is what the core's rules read as out: within a burst, the calls it decided too.
func (e *Engine) inFlight() *fsm.InFlight {
	if e.burst != nil {
		return &e.burst.out
	}
	return &e.calls.out
}

// record stamps (now, where unset), numbers and applies records and keeps them for the
// burst's commit. A record the projection refuses is dropped before the commit — never
// journaled, so every restart's Load accepts the journal — and its task quarantined
// (quarantine.go); the records of the same call for that task go with it. A refused record
// made from a payload is replaced by its record_refused, so the acknowledged payload's task
// is named after a restart, not lost.
func (e *Engine) record(recs ...event.Record) {
	b := e.burst
	now := e.clock.Now()
	var refused map[string]bool // tasks a record of this call was refused for
	for _, rec := range recs {
		if rec.Time.IsZero() {
			rec.Time = now
		}
		rec.Seq = b.next
		err := errDecidedWithRefused
		if rec.Task == "" || !refused[rec.Task] {
			err = e.st.Apply(rec)
		}
		if err != nil {
			standIn, ok := e.refuse(rec, err)
			if rec.Task != "" {
				if refused == nil {
					refused = map[string]bool{}
				}
				refused[rec.Task] = true
			}
			if !ok {
				continue
			}
			rec = standIn // a payload's record: its record_refused is journaled instead
		}
		b.next++
		b.ready.Records = append(b.ready.Records, rec)
		e.afterApply(rec)
	}
}

// afterApply keeps the engine's bookkeeping in step with the projection: held exits go
// where the core says (fsm.State.HeldExitAfter).
func (e *Engine) afterApply(r event.Record) {
	if r.Task != "" {
		e.sched.mark(r.Task)
	}
	e.exits.after(e.st, r)
	if len(e.st.Refusals) > 0 && (r.Type() == event.TypeTaskAdded || r.Type() == event.TypeTaskRejected) {
		e.coreHealth() // a task a refusal named "never run" may be this one, sent again
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
		e.calls.forget(r.Task)
		e.sched.forget(r.Task)
	case *event.TaskTransitioned:
		e.log.Info().Str("task", r.Task).Str("from", string(ev.From)).Str("to", string(ev.To)).Str("reason", ev.Reason).Msg("task transitioned")
	}
}

// endBurst commits the burst's records in one append — with the snapshot, when one is due —
// then, once the commit has returned, chooses the report from the durable outbox, records
// the bookkeeping of the effects (calls out, questions asked, report begun) and releases them
// in the fixed order. If the commit fails it drops the effects — nothing about them was
// recorded — rebuilds the projection from the journal and returns the error.
func (e *Engine) endBurst() (Ready, error) {
	b := e.burst
	snap := e.snapshotIfDue()
	e.burst = nil
	ready := b.ready
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
			e.dropBurst(b, err)
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
		ready.Report = e.report(e.clock.Now(), b.out)
	}
	e.begin(ready)
	e.publishBacklog() // before the poller is answered: it reads it before its next poll
	e.release(ready, b.waiting)
	return ready, nil
}

// begin records, once the commit holding their decisions has returned, what a durable
// burst's effects are about to do: the calls it makes are out, its questions of the runtime
// are asked. (The report's is recorded as it is chosen: report.)
func (e *Engine) begin(r Ready) {
	for _, a := range r.Actions {
		e.calls.out.Add(a.Key())
	}
	if r.Reconcile != nil {
		e.recon.asking = true
	}
	if r.ImageSpace {
		e.images.asking = true
	}
}

// dropBurst handles a failed commit: the effects never leave (and nothing about them was
// recorded), the payloads are answered with the error (not acknowledged), and exits are kept.
func (e *Engine) dropBurst(b *burst, err error) {
	e.setHealth(HealthJournal, err.Error())
	e.metrics.journalErrors.Inc()
	e.log.Error().Err(err).Int("records", len(b.ready.Records)).Msg("burst not journaled; its effects are dropped and the projection rebuilt from the journal")
	e.metrics.payloads.WithLabelValues("journal_failed").Add(float64(len(b.waiting)))
	for _, w := range b.waiting {
		w.done <- err
	}
	e.exits.refused = append(e.exits.refused, b.exits...)
	e.sched.journalRetry = e.clock.Now().Add(time.Second)
	if rerr := e.rebuild(); rerr != nil {
		e.log.Error().Err(rerr).Msg("cannot rebuild the projection from the journal")
	}
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

// rebuild replaces the projection with the journal's truth, after a commit failed with
// records already applied.
func (e *Engine) rebuild() error {
	l, err := Load(e.j, 0)
	if err != nil {
		return err
	}
	e.st = l.State
	e.coreHealth()  // refusals of the burst that failed are gone with it
	e.sched.reset() // every task is decided again, and asks for its wakes again
	for _, t := range e.st.SortedTasks() {
		e.sched.mark(t.ARN)
		if t.Known == event.StatusStoppedAcked {
			e.scheduleCleanup(t)
		}
	}
	return nil
}
