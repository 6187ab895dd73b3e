package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/failpoint"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// Ready is what one burst decided, as plain data: the records to journal, then the effects
// they allow. Nothing in it has happened yet when it is made; Step returns it after the
// commit, with Err set (and no effects) if the commit failed.
type Ready struct {
	Records []event.Record         // journaled in one commit, in this order
	Report  []protocol.StateChange // the next state-change request (none: nothing to send now)
	Acks    []string               // payloads (message ids) the poller may acknowledge
	Actions []fsm.Action           // runtime calls
	Compact *CompactionPlan        // a compaction to run
	// Reconcile asks the runtime again what it holds (non-nil: ask), after it did not
	// answer at recovery: the containers to probe beyond its list.
	Reconcile []probe
	// ImageSpace asks the runtime how full its disk is, for an image collection cycle.
	ImageSpace bool
	Err        error // the commit failed: nothing was released
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
	if r.Reconcile != nil {
		fmt.Fprintf(&b, "reconcile (%d containers to probe)\n", len(r.Reconcile))
	}
	if r.ImageSpace {
		b.WriteString("ask the runtime's disk space (image collection)\n")
	}
	return b.String()
}

// burst is one round of the loop (see doc.go): the Ready being made, the payload answers
// waiting for its commit, and how to undo the bookkeeping of its effects if they are dropped.
type burst struct {
	ready Ready
	next  uint64          // the sequence number the next record gets
	done  []chan<- error  // payload answers, sent once the commit has returned
	exits []docker.Exit   // exits journaled in this burst, handed in again if the commit fails
	undo  []func()        // bookkeeping of held-back effects, reverted if they are dropped
	ctx   context.Context // for the commit
}

// beginBurst opens a burst. The loop is the only appender, so it numbers records itself and
// the journal checks the numbers on Append.
func (e *Engine) beginBurst(ctx context.Context) {
	e.burst = &burst{next: e.j.LastSeq() + 1, ctx: ctx}
}

// onDrop registers how to revert the bookkeeping of an effect held back in the burst.
func (e *Engine) onDrop(f func()) { e.burst.undo = append(e.burst.undo, f) }

// record stamps (now, where unset), numbers and applies records and keeps them for the
// burst's commit. A record the projection refuses is dropped before the commit — never
// journaled, so every restart's Load accepts the journal — and its task quarantined
// (quarantine.go); the records of the same call for that task go with it.
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
			e.refuse(rec, err)
			if rec.Task != "" {
				if refused == nil {
					refused = map[string]bool{}
				}
				refused[rec.Task] = true
			}
			continue
		}
		b.next++
		b.ready.Records = append(b.ready.Records, rec)
		e.afterApply(rec)
	}
}

// endBurst commits the burst's records in one append — with the snapshot, when one is due —
// then releases its effects in the fixed order; if the commit fails it drops them, rebuilds the
// projection from the journal and returns the error.
func (e *Engine) endBurst() (Ready, error) {
	b := e.burst
	snap := e.snapshotIfDue()
	e.burst = nil
	ready := b.ready
	if len(ready.Records) > 0 {
		start := time.Now()
		var err error
		if snap != nil {
			_, err = e.j.AppendSnapshot(b.ctx, snap.at, snap.data, ready.Records...)
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
	}
	if snap != nil {
		e.snapSeq = snap.at
		e.log.Debug().Uint64("at", snap.at).Int("bytes", len(snap.data)).Msg("snapshot stored")
		ready.Compact = e.planCompaction()
	}
	e.release(ready, b.done)
	return ready, nil
}

// dropBurst handles a failed commit: the effects never leave, their bookkeeping is undone,
// the payloads are answered with the error (not acknowledged), and exits are kept.
func (e *Engine) dropBurst(b *burst, err error) {
	e.setHealth(HealthJournal, err.Error())
	e.metrics.journalErrors.Inc()
	e.log.Error().Err(err).Int("records", len(b.ready.Records)).Msg("burst not journaled; its effects are dropped and the projection rebuilt from the journal")
	e.metrics.payloads.WithLabelValues("journal_failed").Add(float64(len(b.done)))
	for _, d := range b.done {
		d <- err
	}
	e.retryExits = append(e.retryExits, b.exits...)
	e.journalRetry = e.clock.Now().Add(time.Second)
	for _, u := range b.undo {
		u()
	}
	if rerr := e.rebuild(); rerr != nil {
		e.log.Error().Err(rerr).Msg("cannot rebuild the projection from the journal")
	}
}

// release starts a durable burst's effects in the order doc.go states: the report, then the
// payload answers (the poller acknowledges those the commit holds), then runtime actions, then
// compaction and the questions of the runtime.
func (e *Engine) release(r Ready, done []chan<- error) {
	if len(r.Report) > 0 {
		e.exec.Go(e.sendReport(r.Report))
	}
	for _, d := range done {
		d <- nil
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
	e.due = dueHeap{}
	clear(e.wakes) // every task is decided again, and asks for its wakes again
	for _, t := range e.st.SortedTasks() {
		e.dirty[t.ARN] = true
		if t.Known == event.StatusStoppedAcked {
			e.scheduleCleanup(t)
		}
	}
	return nil
}
