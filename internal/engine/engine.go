// Package engine is the agent: it turns inputs (payloads, runtime results and exits, report
// answers, timers) into journal records, applies them to the projection, and only then acts —
// runtime calls, reports, cleanup — in the order etcd-io/raft taught: journal first, then
// report, then act. The results of acting come back as new inputs.
//
// It promises:
//   - Nothing acts on state that is not durable: every record is appended (fsync'd) before it
//     is applied, and decisions are taken from the projection alone.
//   - One goroutine owns the projection. Runtime calls and HTTP run on an Executor and report
//     back as inputs, so a throttled report or a slow runtime holds nothing the loop needs.
//   - Waiting is cheap: a task awaiting its acknowledgement is a row in the projection, a
//     cleanup deadline is an entry in one heap, and one timer serves them all.
//   - Restart resumes exactly: snapshot + tail rebuild the projection, the runtime is
//     reconciled, cleanup deadlines come from journaled stop times.
package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentd/agentd/internal/failpoint"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/submit"
	"github.com/rs/zerolog"
)

// ControlPlane is the agent's side of PROTOCOL.md.
type ControlPlane interface {
	Poll(ctx context.Context, wait time.Duration) ([]protocol.Payload, error)
	Ack(ctx context.Context, ids []string) error
	Report(ctx context.Context, changes []protocol.StateChange) protocol.ReportResult
}

// Clock is the engine's time. The daemon uses the wall clock; tests a virtual one.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// WallClock is the real clock.
var WallClock Clock = wallClock{}

// Executor runs slow work (runtime calls, HTTP) off the loop. The input f returns is handed
// back to the loop.
type Executor interface {
	Go(f func() Input)
}

// Config is the engine's configuration.
type Config struct {
	AgentID        string        // "" to keep the journal's, or generate one on first start
	Version        string        // journaled in agent_started
	RuntimeName    string        // journaled in agent_started
	CleanupWait    time.Duration // from the journaled stop time
	StopTimeout    time.Duration // SIGTERM, then kill (default 10 s)
	SnapshotEvery  uint64        // records between snapshots (default 20,000)
	Retention      time.Duration // how long cleaned tasks' history and tombstones are kept (default 7 days; <0: forever)
	Workers        int           // concurrent runtime calls (default 8)
	CleanupWorkers int           // container removals at once (default 4)
	CleanupJitter  time.Duration // spread of cleanup starts (default 50 ms)
	PollWait       time.Duration // long-poll wait (default 20 s)
	Seed           uint64        // jitter (0: random)
	Submit         submit.Policy
}

func (c *Config) defaults() {
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 20000
	}
	if c.Retention == 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.CleanupWorkers <= 0 {
		c.CleanupWorkers = 4
	}
	if c.CleanupJitter < 0 {
		c.CleanupJitter = 0
	} else if c.CleanupJitter == 0 {
		c.CleanupJitter = 50 * time.Millisecond
	}
	if c.PollWait <= 0 {
		c.PollWait = 20 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.Submit.Seed == 0 {
		c.Submit.Seed = c.Seed + 1
	}
}

// Engine is one agent.
type Engine struct {
	cfg   Config
	log   zerolog.Logger
	j     *journal.Journal
	rt    docker.Runtime
	cp    ControlPlane
	clock Clock
	exec  Executor
	rng   *rand.Rand
	fcfg  fsm.Config

	st           *fsm.State
	dirty        map[string]bool        // tasks touched since the last decision
	inflight     map[string]bool        // action keys running on the executor
	retryAt      map[string]retry       // failed actions waiting out their backoff
	due          dueHeap                // cleanup deadlines of STOPPED_ACKED tasks
	removing     int                    // removals in flight (bounded by CleanupWorkers)
	waiting      map[string]bool        // CLEANING tasks waiting for a removal slot
	waitQ        []string               // the same, in order
	early        map[string]docker.Exit // exits seen before their start was journaled, by runtime id
	sub          *submit.Submitter
	journalRetry time.Time     // when to decide again after the journal refused derived records
	retryExits   []docker.Exit // exits the journal refused, kept until it takes them
	compacting   bool          // a compaction runs on the executor
	burst        *burst        // the round being made, while one is
	snapSeq      uint64

	inputs  chan Input
	queries chan query
	ready   atomic.Bool
	health  health
	metrics *Metrics

	startedAt       time.Time // when recovery began (wall clock): the exit stream starts just before
	journaledCursor int64     // the exit stream position the journal holds at recovery
	wg              sync.WaitGroup
}

type retry struct {
	at    time.Time
	tries int
}

// Input is something that happened, for the loop to journal and act on.
type Input interface{ isInput() }

// PayloadInput is a payload from the poller; Done receives nil once it is journaled.
type PayloadInput struct {
	Payload protocol.Payload
	Done    chan error
}

// ActionResult is a finished runtime call.
type ActionResult struct {
	Action   fsm.Action
	ID       string        // created container's id
	Exited   *docker.State // for start (already ended) and stop: how it ended
	Err      error
	Vanished bool // the container is gone from the runtime
}

// ExitInput is a container exit from the runtime's event stream.
type ExitInput struct{ Exit docker.Exit }

// ReportInput is the answer to a state-change report.
type ReportInput struct {
	Sent   []protocol.StateChange
	Result protocol.ReportResult
}

// CompactInput is a finished compaction and the record that closes it.
type CompactInput struct {
	Done *event.CompactionDone
	Err  error
}

// tickInput wakes the loop for timers.
type tickInput struct{}

func (PayloadInput) isInput() {}
func (ActionResult) isInput() {}
func (ExitInput) isInput()    {}
func (ReportInput) isInput()  {}
func (CompactInput) isInput() {}
func (tickInput) isInput()    {}

type query struct {
	f    func(*fsm.State)
	done chan struct{}
}

// New builds an engine over an open journal. Recover must run before anything else.
func New(cfg Config, j *journal.Journal, rt docker.Runtime, cp ControlPlane, clock Clock, exec Executor, log zerolog.Logger) *Engine {
	cfg.defaults()
	if clock == nil {
		clock = WallClock
	}
	e := &Engine{cfg: cfg, log: log, j: j, rt: rt, cp: cp, clock: clock, exec: exec,
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1)),
		fcfg:  fsm.Config{CleanupWait: cfg.CleanupWait},
		dirty: map[string]bool{}, inflight: map[string]bool{}, retryAt: map[string]retry{},
		waiting: map[string]bool{}, early: map[string]docker.Exit{},
		inputs: make(chan Input, 1024), queries: make(chan query),
		metrics: newMetrics(),
	}
	if exec == nil {
		e.exec = &goExecutor{e: e, sem: make(chan struct{}, cfg.Workers)}
	}
	return e
}

// goExecutor runs work on goroutines, at most Workers at once, and hands results to the loop.
type goExecutor struct {
	e   *Engine
	sem chan struct{}
}

func (g *goExecutor) Go(f func() Input) {
	g.e.wg.Add(1)
	go func() {
		defer g.e.wg.Done()
		g.sem <- struct{}{}
		in := f()
		<-g.sem
		if in != nil {
			g.e.inputs <- in
		}
	}()
}

// ErrNotReady is returned by queries before recovery has finished.
var ErrNotReady = errors.New("engine: not ready (recovering)")

// AgentID is the agent's id (valid after Recover).
func (e *Engine) AgentID() string { return e.cfg.AgentID }

// Ready reports whether recovery has finished and the loop runs.
func (e *Engine) Ready() bool { return e.ready.Load() }

// setHealth records a problem of one source; clearHealth marks it healthy again.
func (e *Engine) setHealth(src HealthSource, problem string) {
	e.health.set(src, problem, e.clock.Now())
}

func (e *Engine) clearHealth(src HealthSource) { e.health.clear(src) }

// Query runs f on the loop's goroutine with the projection, read-only, and waits for it.
func (e *Engine) Query(ctx context.Context, f func(*fsm.State)) error {
	if !e.Ready() {
		return ErrNotReady
	}
	q := query{f: f, done: make(chan struct{})}
	select {
	case e.queries <- q:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// State gives the projection to single-goroutine drivers (tests, simulation) between steps.
func (e *Engine) State() *fsm.State { return e.st }

// Journal is the engine's journal.
func (e *Engine) Journal() *journal.Journal { return e.j }

// Logger is the engine's logger.
func (e *Engine) Logger() *zerolog.Logger { return &e.log }

// Metrics are the engine's Prometheus metrics.
func (e *Engine) Metrics() *Metrics { return e.metrics }

// Recover rebuilds the projection from the newest snapshot and the journal's tail, journals
// agent_started, and reconciles the runtime. Any record the projection refuses stops the
// agent: it names the record and points to `agentd journal verify`, and drops nothing.
func (e *Engine) Recover(ctx context.Context) error {
	start := time.Now()
	e.startedAt = start
	snap, skipped, err := e.j.LatestSnapshot()
	if err != nil {
		return fmt.Errorf("engine: recover: %w", err)
	}
	for _, s := range skipped {
		e.log.Warn().Err(s).Msg("skipping a damaged snapshot, replaying further back")
	}
	st := fsm.New()
	from := uint64(1)
	if snap != nil {
		if st, err = fsm.Restore(snap.Data); err != nil {
			e.log.Warn().Err(err).Uint64("snapshot_seq", snap.AtSeq).Msg("snapshot unreadable, replaying the whole journal")
			st = fsm.New()
		} else {
			from = snap.AtSeq + 1
			e.snapSeq = snap.AtSeq
		}
	}
	replayed := 0
	err = e.j.Iterate(from, func(r event.Record) error {
		replayed++
		return st.Apply(r)
	})
	if err != nil {
		return fmt.Errorf("engine: recover from %s: %w (run `agentd journal verify --file %s` for every problem in the file)", e.j.Path(), err, e.j.Path())
	}
	e.st = st
	e.journaledCursor = st.ExitCursor
	switch {
	case e.cfg.AgentID == "" && st.AgentID == "":
		e.cfg.AgentID = newAgentID(e.rng)
	case e.cfg.AgentID == "":
		e.cfg.AgentID = st.AgentID
	case st.AgentID != "" && st.AgentID != e.cfg.AgentID:
		return fmt.Errorf("--agent-id %q: the journal in %s belongs to agent %q; use that id or another data dir", e.cfg.AgentID, e.j.Path(), st.AgentID)
	}
	if _, err := e.commit(ctx, event.Record{Event: &event.AgentStarted{Version: e.cfg.Version, PID: os.Getpid(), AgentID: e.cfg.AgentID, JournalID: e.j.ID(), Runtime: e.cfg.RuntimeName}}); err != nil {
		return err
	}
	for _, t := range st.SortedTasks() { // in order: cleanup jitter is drawn per task
		e.dirty[t.ARN] = true
		switch t.Known {
		case event.StatusStoppedAcked:
			e.scheduleCleanup(t)
		}
	}
	e.log.Info().Uint64("seq", st.LastSeq).Int("replayed", replayed).Uint64("snapshot", e.snapSeq).
		Int("tasks", len(st.Tasks)).Int("unsent", st.OutboxLen()).Dur("took", time.Since(start)).Msg("projection recovered")
	if err := e.reconcile(ctx); err != nil {
		return err
	}
	e.sub = submit.New(e.cfg.Submit)
	e.ready.Store(true)
	return nil
}

func newAgentID(r *rand.Rand) string {
	return fmt.Sprintf("agent-%08x%08x", r.Uint32(), r.Uint32())
}

// record adds records (time stamped now when unset) to the open burst: applied at once,
// journaled with the burst's one commit, before any effect leaves the engine. Every input
// and decision is handled inside a burst; outside one (a bug) the records are committed on
// the spot rather than lost.
func (e *Engine) record(recs ...event.Record) {
	stampNow(recs, e.clock.Now())
	if e.burst == nil {
		e.log.Error().Int("records", len(recs)).Msg("BUG: records made outside a burst")
		_, _ = e.commit(context.Background(), recs...)
		return
	}
	e.stage(recs)
}

func stampNow(recs []event.Record, now time.Time) {
	for i := range recs {
		if recs[i].Time.IsZero() {
			recs[i].Time = now
		}
	}
}

// commit journals records and applies them, now: for recovery, reconciliation and shutdown,
// which run outside the loop's bursts. A record the projection refuses after it is durable is
// a bug in the engine: it is logged loudly and the journal keeps it for the forensics tools.
func (e *Engine) commit(ctx context.Context, recs ...event.Record) ([]event.Record, error) {
	stampNow(recs, e.clock.Now())
	start := time.Now()
	stored, err := e.j.Append(ctx, recs...)
	e.metrics.commitLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		e.setHealth(HealthJournal, err.Error())
		e.metrics.journalErrors.Inc()
		return nil, err
	}
	e.clearHealth(HealthJournal)
	e.metrics.appends.Add(float64(len(stored)))
	failpoint.Hit("engine-after-commit-before-apply")
	for _, r := range stored {
		if err := e.st.Apply(r); err != nil {
			e.log.Error().Err(err).Uint64("seq", r.Seq).Msg("BUG: the projection refused a record the engine journaled")
			e.st.Skip(r)
			continue
		}
		e.afterApply(r)
	}
	return stored, nil
}

// afterApply keeps the engine's indexes in step with the projection.
func (e *Engine) afterApply(r event.Record) {
	if r.Task != "" {
		e.dirty[r.Task] = true
	}
	switch ev := r.Event.(type) {
	case *event.StoppedAcked:
		if t := e.st.Tasks[r.Task]; t != nil {
			e.scheduleCleanup(t)
			e.metrics.blockedOnAck.Observe(r.Time.Sub(t.StoppedAt).Seconds())
		}
	case *event.TaskCleaned:
		e.metrics.cleanups.Inc()
		e.log.Info().Str("task", r.Task).Msg("task cleaned")
	case *event.ContainerTransitioned:
		if ev.To == event.StatusRunning {
			if t := e.st.Tasks[r.Task]; t != nil {
				if c := t.Container(r.Container); c != nil {
					if x, ok := e.early[c.RuntimeID]; ok {
						delete(e.early, c.RuntimeID)
						e.goWork(func() Input { return ExitInput{Exit: x} })
						e.onDrop(func() { e.early[x.ID] = x })
					}
				}
			}
		}
	case *event.TaskTransitioned:
		e.log.Info().Str("task", r.Task).Str("from", string(ev.From)).Str("to", string(ev.To)).Str("reason", ev.Reason).Msg("task transitioned")
	}
}

func (e *Engine) scheduleCleanup(t *fsm.Task) {
	due := t.CleanupDue(e.fcfg)
	if e.cfg.CleanupJitter > 0 {
		due = due.Add(time.Duration(e.rng.Int64N(int64(e.cfg.CleanupJitter))))
	}
	e.due.push(dueEntry{at: due, arn: t.ARN})
}

// Now is the engine clock's time.
func (e *Engine) Now() time.Time { return e.clock.Now() }

// sortedDirty drains the dirty set in ARN order (determinism).
func (e *Engine) sortedDirty() []string {
	out := make([]string, 0, len(e.dirty))
	for a := range e.dirty {
		out = append(out, a)
	}
	clear(e.dirty)
	slices.Sort(out)
	return out
}

// ResolveAgentID settles the agent id before anything else needs it (the runtime labels
// containers with it): the flag's, else the journal's, else a new one kept in the journal.
// A flag that contradicts the journal is refused: the journal's tasks belong to its agent.
func ResolveAgentID(ctx context.Context, j *journal.Journal, flag string) (string, error) {
	kept, err := j.Meta("agent_id")
	if err != nil {
		return "", fmt.Errorf("journal %s: %w", j.Path(), err)
	}
	switch {
	case flag != "" && kept != "" && flag != kept:
		return "", fmt.Errorf("--agent-id %q: the journal in %s belongs to agent %q; use that id or another --data-dir", flag, j.Path(), kept)
	case kept != "":
		return kept, nil
	case flag == "":
		flag = newAgentID(rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
	}
	if err := j.SetMeta(ctx, "agent_id", flag); err != nil {
		return "", err
	}
	return flag, nil
}
