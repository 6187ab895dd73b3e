package simulation

// The agent on its host: opened from its journal and runtime files at the start and after
// every crash (calls in flight lost, a snapshot sometimes damaged), and fed its runtime's
// exit and health streams as its watchers would.

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/simruntime"
	"github.com/agentd/agentd/internal/submit"
)

// start opens the journal and runtime files and recovers an engine from them — at the
// beginning, and after every crash.
func (s *sim) start() error {
	var err error
	full := func() error {
		if s.diskFull {
			return errors.New("write journal.db: no space left on device (simulated)")
		}
		return nil
	}
	if s.j, err = journal.Open(filepath.Join(s.o.Dir, journal.FileName), journal.Options{BeforeCommit: full}); err != nil {
		return err
	}
	if _, err := engine.ResolveAgentID(context.Background(), s.j, agentID); err != nil {
		return err
	}
	if s.rt, err = simruntime.Open(s.o.Dir, agentID, func() time.Time { return s.clock.now }); err != nil {
		return err
	}
	s.rt.SetFaults(s.runtimeFault)
	s.registries()
	s.queue = nil
	s.mark = runtime.ExitMark{}
	log := zerolog.New(nil).Level(zerolog.ErrorLevel).Hook(bugHook{s})
	s.e = engine.New(engine.Config{AgentID: agentID, CleanupWait: time.Duration(s.rng.IntN(5)) * time.Second,
		Seed: s.rng.Uint64() | 1, CleanupWorkers: 2, SnapshotEvery: uint64(50 + s.rng.IntN(200)),
		Submit: submit.Policy{Seed: s.rng.Uint64() | 1, Max: 20 * time.Second, SlowRetry: 10 * time.Second},
		Images: engine.ImageGC{Interval: 30 * time.Second, MinAge: time.Duration(s.pulls.IntN(90)) * time.Second, LowFreePercent: 10},
	}, s.j, s.rt, cpClient{s}, s.clock, executor{s}, log)
	if err := s.e.Recover(context.Background()); err != nil {
		return err
	}
	s.e.Step(context.Background(), nil)
	return nil
}

// damageNewestSnapshot flips a byte of the newest snapshot while the agent is down, as a bad
// disk would: recovery must fall back to an older one (or replay) and lose nothing.
func (s *sim) damageNewestSnapshot() {
	j, err := journal.Open(filepath.Join(s.o.Dir, journal.FileName), journal.Options{})
	if err != nil {
		s.fail("open to damage: %v", err)
		return
	}
	defer j.Close()
	seqs, err := j.SnapshotSeqs()
	if err != nil || len(seqs) == 0 {
		return
	}
	if err := j.DamageSnapshot(seqs[len(seqs)-1]); err != nil {
		s.fail("damage snapshot: %v", err)
		return
	}
	s.log("the newest snapshot (at %d) is damaged while the agent is down", seqs[len(seqs)-1])
}

// crash drops every in-memory object mid-flight — calls in flight are lost, as in a real
// crash — and starts again from the files.
func (s *sim) crash() {
	s.res.Crashes++
	s.log("CRASH with %d calls in flight", len(s.queue))
	if err := s.j.Close(); err != nil {
		s.fail("close journal: %v", err)
		return
	}
	s.j = nil
	if s.faults {
		switch s.rng.IntN(8) {
		case 0:
			s.damageNewestSnapshot()
		case 1:
			s.runtimeDown = true
			s.log("the runtime does not answer as the agent starts")
		}
	}
	err := s.start()
	if err != nil && s.diskFull {
		// Recovery journals agent_started: on a full disk it fails with that cause, and the
		// service manager tries again — here once the disk has room.
		s.log("restart refused: the journal cannot take agent_started (disk full); the disk gets room and the agent starts again")
		s.j.Close()
		s.diskFull = false
		err = s.start()
	}
	if err != nil {
		s.fail("restart: %v", err)
	}
}

// feedHealth hands the runtime's current health verdicts to the engine, as the health stream
// would (it repeats them; the core records only changes).
func (s *sim) feedHealth() {
	verdicts, _ := s.rt.Verdicts()
	for _, h := range verdicts {
		if r := s.e.Step(context.Background(), engine.HealthInput{Change: h}); len(r.Records) > 0 {
			s.log("runtime: %s/%s turns %s", h.Task, h.Container, h.Health)
		}
	}
}

// feedExits hands the runtime's exits to the engine, as the event stream would.
func (s *sim) feedExits() bool {
	exits, _ := s.rt.ExitsAfter(s.mark)
	for _, x := range exits {
		s.mark.Take(x)
		s.log("runtime: %s/%s exited %d", x.Task, x.Container, x.ExitCode)
		s.e.Step(context.Background(), engine.ExitInput{Exit: x})
	}
	return len(exits) > 0
}
