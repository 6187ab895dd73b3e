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
// burst's commit. A record the projection refuses is a bug in the core or the engine: it is
// logged loudly and skipped, and the journal keeps it for the forensics tools.
func (e *Engine) record(recs ...event.Record) {
	b := e.burst
	now := e.clock.Now()
	for i := range recs {
		if recs[i].Time.IsZero() {
			recs[i].Time = now
		}
		recs[i].Seq = b.next
		b.next++
		if err := e.st.Apply(recs[i]); err != nil {
			e.log.Error().Err(err).Uint64("seq", recs[i].Seq).Msg("BUG: the projection refused a record the core made")
			e.st.Skip(recs[i])
		} else {
			e.afterApply(recs[i])
		}
	}
	b.ready.Records = append(b.ready.Records, recs...)
}

// endBurst commits the burst's records in one append, then releases its effects in the fixed
// order; if the commit fails it drops them, rebuilds the projection from the journal and
// returns the error.
func (e *Engine) endBurst() (Ready, error) {
	b := e.burst
	e.burst = nil
	ready := b.ready
	if len(ready.Records) > 0 {
		start := time.Now()
		_, err := e.j.Append(b.ctx, ready.Records...)
		e.metrics.commitLatency.Observe(time.Since(start).Seconds())
		if err != nil {
			e.dropBurst(b, err)
			return Ready{Records: ready.Records, Err: err}, err
		}
		e.clearHealth(HealthJournal)
		e.metrics.appends.Add(float64(len(ready.Records)))
		failpoint.Hit("engine-after-commit-before-apply") // durable; nothing acted on yet
	}
	if e.maybeSnapshot(b.ctx) {
		ready.Compact = e.planCompaction()
	}
	e.release(ready)
	for _, d := range b.done {
		d <- nil
	}
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

// release starts a durable burst's effects: report, then acknowledgements (answered by the
// caller), then runtime actions, then compaction.
func (e *Engine) release(r Ready) {
	if len(r.Report) > 0 {
		e.exec.Go(e.sendReport(r.Report))
	}
	for _, a := range r.Actions {
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
