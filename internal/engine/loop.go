package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentd/agentd/internal/failpoint"
	"time"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// Run is the daemon's loop: it starts the poller and the runtime's exit watcher, then
// journals and acts on every input until ctx ends. It returns after a clean shutdown: the
// poller and watcher stopped, runtime calls in flight finished, agent_stopped journaled.
// Containers keep running: a restart must not kill the workload.
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
	e.Step(loopCtx, nil)
	for {
		var timer <-chan time.Time
		if next := e.nextWake(); !next.IsZero() {
			timer = e.clock.After(max(next.Sub(e.clock.Now()), 0))
		}
		select {
		case in := <-e.inputs:
			e.beginBurst()
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
			e.endBurst(loopCtx)
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
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			_, err := e.commit(ctx, event.Record{Event: &event.AgentStopped{Reason: "signal"}})
			e.log.Info().Uint64("seq", e.st.LastSeq).Msg("agent stopped")
			return err
		case <-e.inputs:
		case q := <-e.queries:
			close(q.done)
		}
	}
}

// Step handles one input and reacts, as one burst: the single-goroutine driver's entry
// (tests, simulation) and the loop's for timer wakes.
func (e *Engine) Step(ctx context.Context, in Input) {
	e.beginBurst()
	if in != nil {
		e.handle(in)
	}
	e.react()
	e.endBurst(ctx)
}

// NextWake is when the engine next has something to do by time alone (zero: nothing).
func (e *Engine) NextWake() time.Time { return e.nextWake() }

func (e *Engine) nextWake() time.Time {
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
	return next
}

func (e *Engine) handle(in Input) {
	switch in := in.(type) {
	case PayloadInput:
		e.handlePayload(in.Payload)
		if in.Done != nil {
			e.burst.done = append(e.burst.done, in.Done) // answered once the burst is durable
		}
	case ActionResult:
		e.handleAction(in)
	case ExitInput:
		e.handleExit(in.Exit)
	case ReportInput:
		e.handleReport(in)
	case CompactInput:
		e.handleCompact(in)
	case tickInput:
	}
}

// react decides and acts until nothing more follows from the journal alone: derived records
// are journaled and applied at once; runtime actions, cleanups and reports are started.
func (e *Engine) react() {
	now := e.clock.Now()
	for top, ok := e.due.peek(); ok && !top.at.After(now); top, ok = e.due.peek() {
		e.due.pop()
		e.dirty[top.arn] = true
	}
	for key, r := range e.retryAt {
		if !r.at.IsZero() && !r.at.After(now) {
			e.dirty[taskOfKey(key)] = true
			r.at = time.Time{} // due: dispatch may go; tries keep counting
			e.retryAt[key] = r
		}
	}
	if len(e.retryExits) > 0 && !e.journalRetry.After(now) {
		exits := e.retryExits
		e.retryExits = nil
		for _, x := range exits {
			e.handleExit(x)
		}
	}
	for round := 0; len(e.dirty) > 0 && round < 64; round++ {
		arns := e.sortedDirty()
		d := e.st.Decide(now, e.fcfg, arns...)
		if len(d.Records) > 0 {
			e.record(d.Records...)
		}
		if len(d.Cleanups) > 0 {
			e.startCleanups(d.Cleanups)
		}
		for _, a := range d.Actions {
			e.dispatch(now, a)
		}
	}
	e.report(now)
	e.metrics.update(e)
}

// startCleanups journals cleanup_started for every task whose cleanup is due, in one commit:
// the projection accepts it only from STOPPED_ACKED, so this is where the guard bites. The
// I/O of cleaning — container removals — is what is bounded (CleanupWorkers), in dispatch.
func (e *Engine) startCleanups(arns []string) {
	recs := make([]event.Record, 0, len(arns))
	for _, arn := range arns {
		if t := e.st.Tasks[arn]; t != nil && t.CleanupAllowed() {
			recs = append(recs, event.Record{Task: arn, Event: &event.CleanupStarted{}})
		}
	}
	e.record(recs...)
	for _, r := range recs {
		e.log.Info().Str("task", r.Task).Msg("cleanup started")
	}
}

// dispatch starts a runtime action unless it is already running or waiting out a backoff.
func (e *Engine) dispatch(now time.Time, a fsm.Action) {
	key := a.Key()
	if e.inflight[key] {
		return
	}
	if r, ok := e.retryAt[key]; ok && r.at.After(now) {
		return
	}
	if a.Kind == fsm.ActRemove {
		// Removals are the I/O of cleaning: thousands of tasks stopping together queue here
		// instead of storming the runtime.
		if e.removing >= e.cfg.CleanupWorkers {
			if !e.waiting[a.Task] {
				e.waiting[a.Task] = true
				e.waitQ = append(e.waitQ, a.Task)
			}
			return
		}
		e.removing++
		e.onDrop(func() { e.removing-- })
	}
	failpoint.Hit("engine-after-apply-before-runtime-call")
	e.inflight[key] = true
	e.onDrop(func() { delete(e.inflight, key) })
	rt, timeout := e.rt, e.cfg.StopTimeout
	e.goWork(func() Input { return runAction(rt, a, timeout) })
}

// runAction is the runtime call for one action, on the executor.
func runAction(rt docker.Runtime, a fsm.Action, stopTimeout time.Duration) ActionResult {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout+2*time.Minute)
	defer cancel()
	res := ActionResult{Action: a}
	id := a.RuntimeID
	switch a.Kind {
	case fsm.ActPull:
		res.Err = rt.Pull(ctx, a.Spec.Image)
	case fsm.ActCreate:
		res.ID, res.Err = rt.Create(ctx, docker.CreateSpec{Task: a.Task, Container: a.Spec})
		failpoint.Hit("runtime-after-create-before-journal")
	case fsm.ActStart:
		if res.Err = rt.Start(ctx, id); res.Err == nil {
			// A container may end before its start is journaled: say so now.
			if st, err := rt.Inspect(ctx, id); err == nil && st.Exited {
				res.Exited = &st
			}
		}
	case fsm.ActStop:
		if res.Err = rt.Stop(ctx, id, stopTimeout); res.Err == nil || errors.Is(res.Err, docker.ErrNotFound) {
			st, err := rt.Inspect(ctx, id)
			switch {
			case errors.Is(err, docker.ErrNotFound):
				res.Err, res.Vanished = nil, true
			case err != nil:
				res.Err = err
			default:
				res.Err, res.Exited = nil, &st
			}
		}
	case fsm.ActRemove:
		if id == "" {
			// Never journaled an id (a crash after create, or a stop before it): find it by name.
			if st, err := rt.Find(ctx, a.Task, a.Container); err == nil {
				id = st.ID
			} else if !errors.Is(err, docker.ErrNotFound) {
				res.Err = err
			}
		}
		if id != "" && res.Err == nil {
			res.Err = rt.Remove(ctx, id)
		}
	}
	return res
}

// handleAction journals what a runtime call did, if it still applies.
func (e *Engine) handleAction(r ActionResult) {
	a := r.Action
	key := a.Key()
	delete(e.inflight, key)
	if a.Kind == fsm.ActRemove {
		e.freeRemovalSlot()
	}
	t := e.st.Tasks[a.Task]
	if t == nil {
		return
	}
	c := t.Container(a.Container)
	if c == nil {
		return
	}
	log := e.log.With().Str("task", a.Task).Str("container", a.Container).Str("action", string(a.Kind)).Logger()
	if a.Kind == fsm.ActRemove {
		if r.Err != nil {
			e.backoffAction(key, r.Err)
			return
		}
		delete(e.retryAt, key)
		if t.Known == event.StatusCleaning && !c.Removed {
			e.record(event.Record{Task: a.Task, Container: a.Container, Event: &event.ContainerRemoved{RuntimeID: c.RuntimeID}})
			failpoint.Hit("cleanup-between-removals")
		}
		return
	}
	if c.Known != a.From {
		return // overtaken (an exit, a stop): the projection decides again
	}
	rec := event.Record{Task: a.Task, Container: a.Container}
	switch {
	case errors.Is(r.Err, docker.ErrUnavailable):
		// The runtime is down, not the container: try again later, fail nothing.
		e.setHealth(HealthRuntime, r.Err.Error())
		e.backoffAction(key, r.Err)
		return
	case a.Kind == fsm.ActStop && r.Err != nil:
		e.backoffAction(key, r.Err)
		return
	case a.Kind == fsm.ActStop:
		delete(e.retryAt, key)
		e.clearHealth(HealthRuntime)
		ev := &event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: "stopped by agentd: " + t.StopCause}
		if r.Vanished {
			ev.Reason = "container vanished from the runtime"
		} else if r.Exited != nil {
			code := r.Exited.ExitCode
			ev.ExitCode = &code
		}
		rec.Event = ev
	case r.Err != nil:
		log.Warn().Err(r.Err).Msg("runtime call failed; the container is recorded STOPPED")
		rec.Event = &event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: fmt.Sprintf("%s failed: %v", a.Kind, r.Err)}
	case a.Kind == fsm.ActPull:
		e.clearHealth(HealthRuntime)
		rec.Event = &event.ContainerTransitioned{From: c.Known, To: event.StatusPulled}
	case a.Kind == fsm.ActCreate:
		rec.Event = &event.ContainerTransitioned{From: c.Known, To: event.StatusCreated, RuntimeID: r.ID}
	case a.Kind == fsm.ActStart:
		recs := []event.Record{{Task: a.Task, Container: a.Container, Event: &event.ContainerTransitioned{From: c.Known, To: event.StatusRunning}}}
		if r.Exited != nil {
			code := r.Exited.ExitCode
			recs = append(recs, event.Record{Task: a.Task, Container: a.Container, Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: &code}})
		}
		e.record(recs...)
		return
	}
	e.record(rec)
}

// freeRemovalSlot ends a removal and gives its slot to the task that has waited longest.
func (e *Engine) freeRemovalSlot() {
	e.removing--
	for len(e.waitQ) > 0 {
		arn := e.waitQ[0]
		e.waitQ = e.waitQ[1:]
		delete(e.waiting, arn)
		if _, live := e.st.Tasks[arn]; live {
			e.dirty[arn] = true
			return
		}
	}
}

func (e *Engine) backoffAction(key string, err error) {
	r := e.retryAt[key]
	r.tries++
	wait := min(time.Duration(1<<min(r.tries, 8))*100*time.Millisecond, 30*time.Second)
	r.at = e.clock.Now().Add(wait)
	e.retryAt[key] = r
	e.log.Warn().Err(err).Str("action", key).Int("tries", r.tries).Dur("retry_in", wait).Msg("runtime call failed; will retry")
}

func taskOfKey(key string) string {
	// Keys are "kind task container"; ARNs have no spaces (protocol-validated).
	var kind, task string
	fmt.Sscanf(key, "%s %s", &kind, &task)
	return task
}

// handleExit journals a container's exit from the event stream, once.
func (e *Engine) handleExit(x docker.Exit) {
	t := e.st.Tasks[x.Task]
	if t == nil {
		return
	}
	c := t.Container(x.Container)
	if c == nil || (c.RuntimeID != "" && c.RuntimeID != x.ID) {
		return
	}
	switch c.Known {
	case event.StatusRunning:
		code := x.ExitCode
		e.record(event.Record{Task: x.Task, Container: x.Container,
			Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: &code, Cursor: x.Cursor}})
		if e.burst != nil {
			// An exit is a fact from outside that nothing else re-derives until a restart:
			// should the burst's commit fail, it is kept and handled again.
			e.burst.exits = append(e.burst.exits, x)
		}
	case event.StatusCreated:
		e.early[x.ID] = x // its start is not journaled yet
	}
}

// report starts a state-change report when the submitter allows and something is unsent.
func (e *Engine) report(now time.Time) {
	if e.cp == nil || e.sub == nil || e.st.OutboxLen() == 0 || !e.sub.Ready(now) {
		return
	}
	batch := e.st.Pending(submitBatch)
	if len(batch) == 0 {
		return
	}
	sent := e.sub.Begin(batch)
	e.onDrop(e.sub.Abort)
	cp := e.cp
	e.goWork(func() Input {
		res := cp.Report(context.Background(), sent)
		if res.Outcome == protocol.Settled {
			failpoint.Hit("report-after-send-before-journal") // settled there, not yet here
		}
		return ReportInput{Sent: sent, Result: res}
	})
}

const submitBatch = protocol.MaxChangesPerRequest

// handleReport journals what the control plane settled; only a settled task STOPPED opens the
// door to cleanup (the projection then decides stopped_acked).
func (e *Engine) handleReport(in ReportInput) {
	o := e.sub.Done(e.clock.Now(), in.Sent, in.Result)
	for _, c := range in.Sent {
		e.dirty[c.TaskARN] = true // a settled STOPPED makes stopped_acked due
	}
	e.metrics.reports.WithLabelValues(string(in.Result.Outcome)).Inc()
	if o.Log != "" {
		if in.Result.Outcome == protocol.Settled {
			e.log.Info().Msg(o.Log)
		} else {
			e.log.Warn().Str("outcome", string(in.Result.Outcome)).Msg(o.Log)
		}
	}
	var recs []event.Record
	if o.Settled != nil {
		recs = append(recs, settledByTask(o.Settled, in.Sent)...)
	}
	if o.Attempt != nil {
		recs = append(recs, event.Record{Event: o.Attempt})
	}
	if len(recs) > 0 {
		e.record(recs...) // lost with a failed commit: the changes are sent again, same ids
	}
	// The next batch goes out now, before the decisions this answer unlocks are journaled:
	// under throttling the request slot is the scarce thing, not the disk.
	e.report(e.clock.Now())
	switch problem, credentials := e.sub.Health(); {
	case problem == "":
		e.clearHealth(HealthControlPlane)
		e.clearHealth(HealthCredentials)
	case credentials:
		e.setHealth(HealthCredentials, problem)
		e.clearHealth(HealthControlPlane)
	default:
		e.setHealth(HealthControlPlane, problem)
		e.clearHealth(HealthCredentials)
	}
}

// settledByTask splits an answer into one changes_settled record per task, in the order the
// tasks' changes were sent, all in one commit: each task's settlements then belong to its
// history (dump --task, timeline) and go with it at compaction, so the history kept is always
// whole.
func settledByTask(s *event.ChangesSettled, sent []protocol.StateChange) []event.Record {
	taskOf := make(map[string]string, len(sent))
	var order []string
	for _, c := range sent {
		if _, seen := taskOf[c.ID]; !seen {
			taskOf[c.ID] = c.TaskARN
		}
	}
	per := map[string]*event.ChangesSettled{}
	get := func(task string) *event.ChangesSettled {
		if per[task] == nil {
			per[task] = &event.ChangesSettled{}
			order = append(order, task)
		}
		return per[task]
	}
	for _, id := range s.Accepted {
		p := get(taskOf[id])
		p.Accepted = append(p.Accepted, id)
	}
	for _, r := range s.Rejected {
		p := get(taskOf[r.ID])
		p.Rejected = append(p.Rejected, r)
	}
	recs := make([]event.Record, 0, len(order))
	for _, task := range order {
		recs = append(recs, event.Record{Task: task, Event: per[task]})
	}
	return recs
}

// SnapshotInterval is how many records pass between snapshots: at least every, and at least
// four records for each task and tombstone the snapshot holds — so writing snapshots never
// costs more than the history they save replaying, however much state a host keeps.
func SnapshotInterval(st *fsm.State, every uint64) uint64 {
	return max(every, 4*uint64(len(st.Tasks)+len(st.Tombstones)))
}

// maybeSnapshot stores the projection once enough records have passed since the last
// snapshot, so a restart replays only the tail. The snapshot and its snapshot_taken record go
// in one commit.
func (e *Engine) maybeSnapshot(ctx context.Context) {
	if e.st.LastSeq-e.snapSeq < SnapshotInterval(e.st, e.cfg.SnapshotEvery) {
		return
	}
	at := e.st.LastSeq
	data, err := e.st.Snapshot()
	if err != nil {
		e.log.Error().Err(err).Msg("cannot encode a snapshot")
		return
	}
	rec, err := e.j.SaveSnapshot(ctx, at, data, event.Record{Time: e.clock.Now(), Event: &event.SnapshotTaken{AtSeq: at, Bytes: len(data)}})
	if err != nil {
		e.log.Error().Err(err).Msg("cannot store a snapshot")
		return
	}
	if err := e.st.Apply(rec); err != nil {
		e.log.Error().Err(err).Msg("BUG: snapshot_taken refused")
		e.st.Skip(rec)
	}
	e.snapSeq = at
	e.log.Debug().Uint64("at", at).Int("bytes", len(data)).Msg("snapshot stored")
	e.maybeCompact()
}
