package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/simruntime"
	"github.com/agentd/agentd/internal/testrig"
)

// The shutdown burst may take a snapshot, and a snapshot plans a compaction; but by then Run's
// wait group is done, so work started on the executor would outlive Run and race the journal's
// close. Here a compaction is due exactly when the engine stops: a payload's message is past
// the retention horizon only once the clock jumps, just before the stop. Every commit after
// the shutdown's own is held, so a compaction started anyway is still running when the test
// looks; no goroutine of the executor may outlive Run.
func TestShutdownStartsNoCompaction(t *testing.T) {
	dir := t.TempDir()
	var stopping atomic.Bool
	var afterStop atomic.Int32
	gate := make(chan struct{})
	j, err := journal.Open(filepath.Join(dir, journal.FileName), journal.Options{BeforeCommit: func() error {
		if stopping.Load() && afterStop.Add(1) > 1 {
			<-gate // a commit after agent_stopped's: held until the test has looked
			return errors.New("held past the agent's stop")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	t.Cleanup(func() { close(gate) }) // first: a held commit goes, then the journal closes
	clock := testrig.NewClock(t0)
	rt, err := simruntime.Open(filepath.Join(dir, "sim"), "agent-stop", clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{AgentID: "agent-stop", Seed: 1, CleanupWait: time.Hour, SnapshotEvery: 1, Retention: time.Hour}
	e := engine.New(cfg, j, rt, nil, clock, nil, zerolog.Nop())
	if err := e.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	e.Step(context.Background(), engine.PayloadInput{Payload: protocol.Payload{MessageID: "m-empty"}, Done: done})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := e.State().Messages["m-empty"]; !ok {
		t.Fatal("the empty payload's message is not journaled: the test needs one to compact away")
	}

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx) }()
	if err := e.Query(context.Background(), func(*fsm.State) {}); err != nil { // the loop runs
		t.Fatal(err)
	}
	clock.Set(t0.Add(2 * time.Hour)) // the message is past the retention now
	stopping.Store(true)
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context's end")
	}
	if g := executorGoroutines(); g != "" {
		t.Fatalf("work started on the executor outlives Run:\n%s", g)
	}
}

// executorGoroutines is the stacks of goroutines running the engine's executor work, waiting
// (bounded) for those that are about to end.
func executorGoroutines() string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var found []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "engine.(*goExecutor).run") {
				found = append(found, g)
			}
		}
		if len(found) == 0 || time.Now().After(deadline) {
			return strings.Join(found, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
