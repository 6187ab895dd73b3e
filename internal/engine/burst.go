package engine

import (
	"context"
	"fmt"
	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/failpoint"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// burst is one round of the loop: the inputs taken together, the records they and the
// decisions after them produced, and the effects held back until those records are durable.
//
// Records are applied to the projection as they are made, so each input and decision sees
// the one before; but nothing leaves the engine — no runtime call, no report, no payload
// acknowledgement — until the burst's one commit has returned. One commit per burst instead
// of one per input is what lets a busy agent keep up; holding effects back is what keeps
// "journal first, then act". If the commit fails, the projection is rebuilt from the journal
// and the held-back effects are dropped: they were decided on state that never became true.
type burst struct {
	records []event.Record
	next    uint64         // the sequence number the next staged record gets
	work    []func() Input // executor work, started once durable
	done    []chan<- error // payload acknowledgements, answered once durable
	exits   []docker.Exit  // exits journaled in this burst, kept again if the commit fails
	undo    []func()       // bookkeeping of held-back work, reverted if it is dropped
}

// onDrop registers how to revert the bookkeeping of work held back in the burst (an action
// marked in flight, a report begun), should the commit fail and the work be dropped.
func (e *Engine) onDrop(f func()) {
	if e.burst != nil {
		e.burst.undo = append(e.burst.undo, f)
	}
}

// beginBurst starts a burst. The loop is the only appender of records, so the sequence
// numbers the journal will assign are known in advance.
func (e *Engine) beginBurst() {
	e.burst = &burst{next: e.j.LastSeq() + 1}
}

// stage assigns sequence numbers, applies and keeps records for the burst's commit.
func (e *Engine) stage(recs []event.Record) {
	b := e.burst
	for i := range recs {
		recs[i].Seq = b.next
		b.next++
		if err := e.st.Apply(recs[i]); err != nil {
			e.log.Error().Err(err).Uint64("seq", recs[i].Seq).Msg("BUG: the projection refused a record the engine made")
			e.st.Skip(recs[i])
		} else {
			e.afterApply(recs[i])
		}
	}
	b.records = append(b.records, recs...)
}

// goWork hands work to the executor — after the burst's commit when one is open.
func (e *Engine) goWork(f func() Input) {
	if e.burst != nil {
		e.burst.work = append(e.burst.work, f)
		return
	}
	e.exec.Go(f)
}

// endBurst commits the burst's records in one append, then releases its effects; on failure
// it rebuilds the projection from the journal and drops them.
func (e *Engine) endBurst(ctx context.Context) {
	b := e.burst
	e.burst = nil
	if len(b.records) > 0 {
		start := time.Now()
		stored, err := e.j.Append(ctx, b.records...)
		e.metrics.commitLatency.Observe(time.Since(start).Seconds())
		if err == nil && (len(stored) != len(b.records) || stored[0].Seq != b.records[0].Seq) {
			err = fmt.Errorf("journal assigned sequence %d where the engine expected %d", stored[0].Seq, b.records[0].Seq)
		}
		if err != nil {
			e.setHealth(HealthJournal, err.Error())
			e.metrics.journalErrors.Inc()
			e.log.Error().Err(err).Int("records", len(b.records)).Msg("burst not journaled; its effects are dropped and the projection rebuilt from the journal")
			e.metrics.payloads.WithLabelValues("journal_failed").Add(float64(len(b.done)))
			for _, d := range b.done {
				d <- err
			}
			for _, x := range b.exits {
				e.retryExits = append(e.retryExits, x)
			}
			e.journalRetry = e.clock.Now().Add(time.Second)
			for _, u := range b.undo {
				u()
			}
			if rerr := e.rebuild(); rerr != nil {
				e.log.Error().Err(rerr).Msg("cannot rebuild the projection from the journal")
			}
			return
		}
		e.clearHealth(HealthJournal)
		e.metrics.appends.Add(float64(len(stored)))
		failpoint.Hit("engine-after-commit-before-apply") // durable; nothing acted on yet
	}
	for _, f := range b.work {
		e.exec.Go(f)
	}
	for _, d := range b.done {
		d <- nil
	}
	e.maybeSnapshot(ctx)
}

// rebuild replaces the projection with the journal's truth (newest snapshot + tail), after a
// commit failed with records already applied.
func (e *Engine) rebuild() error {
	st := fsm.New()
	from := uint64(1)
	if snap, _, err := e.j.LatestSnapshot(); err == nil && snap != nil {
		if restored, err := fsm.Restore(snap.Data); err == nil {
			st, from = restored, snap.AtSeq+1
		}
	}
	if err := e.j.Iterate(from, func(r event.Record) error { return st.Apply(r) }); err != nil {
		return err
	}
	e.st = st
	e.due = dueHeap{}
	for _, t := range st.SortedTasks() {
		e.dirty[t.ARN] = true
		if t.Known == event.StatusStoppedAcked {
			e.scheduleCleanup(t)
		}
	}
	return nil
}
