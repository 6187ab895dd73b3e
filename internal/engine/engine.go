package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/submit"
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
	AgentID       string        // "" to keep the journal's, or generate one on first start
	Version       string        // journaled in agent_started
	RuntimeName   string        // journaled in agent_started
	CleanupWait   time.Duration // from the journaled stop time
	StopTimeout   time.Duration // SIGTERM, then kill (default 10 s)
	SnapshotEvery uint64        // records between snapshots (default 20,000)
	Retention     time.Duration // how long cleaned tasks' history and tombstones are kept (default 7 days; <0: forever)
	// JournalMaxBytes bounds the journal's bytes in use: past it, compaction drops cleaned
	// tasks' history before the retention ends, keeping their tombstones (0: no budget).
	JournalMaxBytes int64
	Workers         int           // concurrent runtime calls (default 8)
	CleanupWorkers  int           // container removals at once (default 4)
	CleanupJitter   time.Duration // spread of cleanup starts (default 50 ms)
	PollWait        time.Duration // long-poll wait (default 20 s)
	Seed            uint64        // jitter (0: random)
	Submit          submit.Policy
	TaskRules       protocol.Rules // how payloads' tasks are read: the host's allowed bind roots
	Images          ImageGC        // image garbage collection (zero Interval: off)
	PullWorkers     int            // pulls at once, apart from the other calls (default 4): slow registries never hold up a stop
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
	if c.Images.PerCycle <= 0 {
		c.Images.PerCycle = 5
	}
	if c.Images.InitialInterval <= 0 {
		c.Images.InitialInterval = c.Images.Interval
	}
	if c.PullWorkers <= 0 {
		c.PullWorkers = 4
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
	burst        *burst                  // the round being made, while one is
	dirty        map[string]bool         // tasks touched since the last decision
	out          fsm.InFlight            // runtime calls on the executor, the core's view of them (fsm/gate.go)
	retryAt      map[fsm.ActionKey]retry // failed calls waiting out their backoff
	due          dueHeap                 // cleanup deadlines of STOPPED_ACKED tasks, and the core's wakes
	wakes        map[string]time.Time    // the core's last wake pushed per task (fsm.Wake), so a wake is pushed once
	removalQ     fsm.RemovalQueue        // CLEANING tasks waiting for a removal slot (CleanupWorkers)
	held         map[string]docker.Exit  // exits seen before their start was journaled, by runtime id
	released     []docker.Exit           // held exits whose start is now journaled, to hand in again
	sub          *submit.Submitter
	journalRetry time.Time     // when to decide again after the journal refused a burst
	retryExits   []docker.Exit // exits the journal refused, kept until it takes them
	compacting   bool          // a compaction runs on the executor
	// reconcilePending: the runtime did not answer at recovery; no runtime call is made
	// until a reconcile succeeds (retried with backoff, reconcileAt).
	reconcilePending bool
	reconciling      bool
	reconcileAt      time.Time
	reconcileTries   int
	snapSeq          uint64
	quarantined      map[string]string    // tasks a refused record concerned: why (quarantine.go)
	coreRefusal      string               // the last refused record without a task
	imagesAt         time.Time            // the next image collection cycle (zero: not scheduled yet)
	imagesAsking     bool                 // a cycle's disk question is out
	imagesDeferred   int                  // cycles put off in a row because pulls were out
	pullsHeld        map[string]bool      // tasks whose pull waits for image removals in flight
	imagesRefused    map[string]time.Time // images the runtime refused to remove, by id: when (images.go)
	pullCtx          context.Context      // pulls run under it; cancelled when the agent stops
	stopPulls        context.CancelFunc

	inputs   chan Input
	linger   linger // how long a burst waits for calls about to end (linger.go)
	queries  chan query
	answered chan struct{} // a report was answered: the poller's backoff is over (poller.go)
	ready    atomic.Bool
	health   health
	metrics  *Metrics

	startedAt       time.Time // when recovery began (wall clock): the exit stream starts just before
	journaledCursor int64     // the exit stream position the journal holds at recovery
	wg              sync.WaitGroup
}

// retry is a failed runtime call's backoff: when it may go again, and how often it failed.
type retry struct {
	at    time.Time
	tries int
}

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
		dirty: map[string]bool{}, wakes: map[string]time.Time{}, out: fsm.NewInFlight(cfg.CleanupWorkers), retryAt: map[fsm.ActionKey]retry{},
		held: map[string]docker.Exit{}, pullsHeld: map[string]bool{}, imagesRefused: map[string]time.Time{},
		inputs: make(chan Input, 1024), queries: make(chan query), answered: make(chan struct{}, 1),
		metrics: newMetrics(),
	}
	e.pullCtx, e.stopPulls = context.WithCancel(context.Background())
	if exec == nil {
		e.exec = &goExecutor{e: e, sem: make(chan struct{}, cfg.Workers), slow: make(chan struct{}, cfg.PullWorkers)}
	}
	return e
}

// goExecutor runs work on goroutines, at most Workers at once, and hands results to the loop.
// Slow work (pulls, which may take minutes) has slots of its own, so it never holds up a stop.
type goExecutor struct {
	e    *Engine
	sem  chan struct{}
	slow chan struct{}
}

func (g *goExecutor) Go(f func() Input) { g.run(g.sem, f) }

// GoSlow runs work that may take minutes, on the slow slots.
func (g *goExecutor) GoSlow(f func() Input) { g.run(g.slow, f) }

func (g *goExecutor) run(sem chan struct{}, f func() Input) {
	g.e.wg.Add(1)
	go func() {
		defer g.e.wg.Done()
		sem <- struct{}{}
		in := f()
		<-sem
		if in != nil {
			g.e.inputs <- in
		}
	}()
}

// slowExecutor is an Executor with separate slots for slow work.
type slowExecutor interface{ GoSlow(f func() Input) }

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
