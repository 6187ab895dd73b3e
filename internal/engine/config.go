package engine

import (
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/submit"
)

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
	// IntakeBacklog is how many tasks may wait for a removal slot before the poller holds
	// its next poll (intake.go; default 500), and IntakeHoldMax the longest it holds one
	// (default 5 s).
	IntakeBacklog int
	IntakeHoldMax time.Duration
	// ReleaseMemory gives freed heap back to the OS once the loop is idle after a burst
	// (memory.go; default debug.FreeOSMemory).
	ReleaseMemory func()
}

func (c *Config) defaults() {
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.ReleaseMemory == nil {
		c.ReleaseMemory = debug.FreeOSMemory
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
	if c.IntakeBacklog <= 0 {
		c.IntakeBacklog = 500
	}
	if c.IntakeHoldMax <= 0 {
		c.IntakeHoldMax = 5 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.Submit.Seed == 0 {
		c.Submit.Seed = c.Seed + 1
	}
}
