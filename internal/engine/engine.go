package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
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

// Engine is one agent around its core, the node (fsm.Node), which owns every decision and the
// state they read. The engine's own state is time and I/O, each part in its own file with the
// invariant it guards: the burst being committed and released (ready.go), the deadlines the
// node asked for (schedule.go), failed calls' backoffs (calls.go), when to ask an unanswering
// runtime again (reconcile.go), snapshots and compaction (upkeep.go), and how inputs reach the
// loop (input.go).
type Engine struct {
	cfg   Config
	log   zerolog.Logger
	j     *journal.Journal
	rt    runtime.Runtime
	cp    ControlPlane
	clock Clock
	exec  Executor
	rng   *rand.Rand

	node     *fsm.Node  // the core: every decision, and the state it reads
	st       *fsm.State // the node's projection (node.State()), read by the engine's I/O
	burst    *burst     // the round being made, while one is
	sched    schedule
	calls    calls
	recon    reconciler
	withhold map[fsm.ActionKey]bool // actions the next burst keeps back (Withhold: scripts)
	// exitsFrom is where the exit stream resumes (Recover sets it).
	exitsFrom int64
	// recoveredAt is the journal's last record when Recover loaded it: refusals at or before
	// it are remembered from another process (the degraded core_refusals slot, quarantine.go).
	recoveredAt uint64
	upkeep      upkeep
	mem         memory    // releasing what a burst left behind (memory.go)
	sub         *reporter // the reports' pacing and batching (internal/submit)
	// space is the runtime's last disk answer, for the log line of a low disk (noted).
	space ImageSpaceInput

	inbox   inbox
	linger  linger // how long a burst waits for calls about to end (linger.go)
	health  health
	metrics *Metrics
}

// New builds an engine over an open journal. Recover must run before anything else.
func New(cfg Config, j *journal.Journal, rt runtime.Runtime, cp ControlPlane, clock Clock, exec Executor, log zerolog.Logger) *Engine {
	cfg.defaults()
	if clock == nil {
		clock = WallClock
	}
	e := &Engine{cfg: cfg, log: log, j: j, rt: rt, cp: cp, clock: clock, exec: exec,
		rng:      jitter.Rand(cfg.Seed),
		calls:    newCalls(),
		withhold: map[fsm.ActionKey]bool{},
		inbox:    inbox{in: make(chan Input, 1024), queries: make(chan query), answered: make(chan struct{}, 1), drained: make(chan struct{}, 1)},
		metrics:  newMetrics(),
	}
	e.health.degraded = []HealthSource{HealthCoreRefusals}
	if exec == nil {
		e.exec = &goExecutor{e: e, sem: make(chan struct{}, cfg.Workers), slow: make(chan struct{}, cfg.PullWorkers)}
	}
	return e
}

// fcfg is what the core's decisions depend on besides the journal.
func (e *Engine) fcfg() fsm.Config { return fsm.Config{CleanupWait: e.cfg.CleanupWait} }

// nodeConfig is the node's share of the configuration.
func (e *Engine) nodeConfig() fsm.NodeConfig {
	im := e.cfg.Images
	return fsm.NodeConfig{Config: e.fcfg(), RemovalSlots: e.cfg.CleanupWorkers,
		Images:        fsm.ImageConfig{MinAge: im.MinAge, PerCycle: im.PerCycle, LowFreePercent: im.LowFreePercent},
		ImageInterval: im.Interval, ImageFirst: im.InitialInterval,
		Compaction: fsm.CompactionPolicy{Retention: e.cfg.Retention, MaxBytes: e.cfg.JournalMaxBytes}}
}

// ErrNotReady is returned by queries before recovery has finished.
var ErrNotReady = errors.New("engine: not ready (recovering)")

// AgentID is the agent's id (valid after Recover).
func (e *Engine) AgentID() string { return e.cfg.AgentID }

// Ready reports whether recovery has finished and the loop runs.
func (e *Engine) Ready() bool { return e.inbox.ready.Load() }

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
	case e.inbox.queries <- q:
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
