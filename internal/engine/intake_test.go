package engine_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/simruntime"
	"github.com/agentd/agentd/internal/testrig"
)

// stuckRemovals is the simulated runtime with container removals that hang until released.
type stuckRemovals struct {
	*simruntime.Runtime
	release chan struct{} // closed: removals go through
}

func (r *stuckRemovals) Remove(ctx context.Context, id string) error {
	select {
	case <-r.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.Runtime.Remove(ctx, id)
}

// burst is a control plane that answers the first poll with n payloads and every later one,
// after a moment, with none; it tells the test of each poll.
func burst(t *testing.T, n int) *testrig.ControlPlane {
	payloads := payloadsOf(t, n)
	var answered atomic.Bool
	return &testrig.ControlPlane{Polled: make(chan int, 1), Payloads: func(ctx context.Context, _ time.Duration) ([]protocol.Payload, error) {
		if !answered.Swap(true) {
			return payloads, nil
		}
		select { // a long poll that ends quickly: an agent that is not held polls again and again
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, nil
	}}
}

// runBurst runs an engine whose removals hang until rt.release is closed, with one removal
// slot and an intake bound of 5, against cp.
func runBurst(t *testing.T, cp *testrig.ControlPlane, holdMax time.Duration) (*engine.Engine, *stuckRemovals) {
	t.Helper()
	dir := t.TempDir()
	j := openJournal(t, dir, &atomic.Bool{})
	id, err := engine.ResolveAgentID(context.Background(), j, "agent-intake")
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simruntime.Open(filepath.Join(dir, "sim"), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt := &stuckRemovals{Runtime: sim, release: make(chan struct{})}
	e := engine.New(engine.Config{AgentID: id, CleanupWait: time.Millisecond, CleanupJitter: -1, CleanupWorkers: 1,
		IntakeBacklog: 5, IntakeHoldMax: holdMax, Seed: 1}, j, rt, cp, nil, nil, zerolog.Nop())
	if err := e.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		select {
		case <-rt.release:
		default:
			close(rt.release)
		}
		cancel()
		<-done
		j.Close()
	})
	return e, rt
}

// waitCleaning waits, bounded, until n tasks are CLEANING: stopped, acknowledged, and waiting
// for their containers' removal.
func waitCleaning(t *testing.T, e *engine.Engine, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := 0
		if err := e.Query(context.Background(), func(st *fsm.State) {
			for _, task := range st.Tasks {
				if task.Known == event.StatusCleaning {
					got++
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks CLEANING after 20s, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A burst of tasks costs what the agent can finish, not the whole backlog (issue 25): while
// more tasks wait for a removal slot than IntakeBacklog, the agent takes no more — its next
// poll is held, the tasks stay with the control plane — and it polls again once removals go
// through. Without the hold, 20,000 tasks posted at once left 16,666 waiting to be cleaned,
// each held whole, and the agent's peak RSS was 2.3x its RSS at rest (bench rss).
func TestARemovalBacklogHoldsThePoll(t *testing.T) {
	cp := burst(t, 20)
	e, rt := runBurst(t, cp, time.Minute)
	waitCleaning(t, e, 10)
	held := cp.Polls()
	// An agent not held polls every 10 ms here: 30 times in this window.
	time.Sleep(300 * time.Millisecond)
	if got := cp.Polls(); got > held+1 {
		t.Fatalf("%d polls while at least 9 tasks waited for the one removal slot (bound 5), want at most 1", got-held)
	}
	for len(cp.Polled) > 0 {
		<-cp.Polled
	}
	close(rt.release)
	waitFor(t, cp.Polled, "poll after the removals went through")
}

// A runtime that stops removing slows the intake but never cuts it: the agent still hears of
// new tasks and stops, a poll at least every IntakeHoldMax.
func TestAStuckRemovalBacklogStillPolls(t *testing.T) {
	cp := burst(t, 20)
	e, _ := runBurst(t, cp, 200*time.Millisecond)
	waitCleaning(t, e, 10)
	for len(cp.Polled) > 0 {
		<-cp.Polled
	}
	waitFor(t, cp.Polled, "poll while the removals hang")
}
