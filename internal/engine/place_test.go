package engine_test

import (
	"context"
	"strings"
	"sync"
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

// placeAgent is one agent process over the journal in dir: started, queried, stopped cleanly.
type placeAgent struct {
	e    *engine.Engine
	j    *journal.Journal
	full atomic.Bool // every commit fails, as on a full disk
	// stop stops the agent (once) and says what Run returned.
	stop func() error
}

func startPlaceAgent(t *testing.T, dir string, cp engine.ControlPlane, logs lines) *placeAgent {
	t.Helper()
	a := &placeAgent{}
	a.j = openJournal(t, dir, &a.full)
	id, err := engine.ResolveAgentID(context.Background(), a.j, "agent-place")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := simruntime.Open(dir, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.e = engine.New(engine.Config{AgentID: id, CleanupWait: time.Hour, Seed: 1}, a.j, rt, cp, nil, nil, zerolog.New(logs))
	if err := a.e.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.e.Run(ctx) }()
	var once sync.Once
	var ran error
	a.stop = func() error {
		once.Do(func() {
			cancel()
			ran = <-done
			a.j.Close()
		})
		return ran
	}
	t.Cleanup(func() { a.stop() })
	return a
}

// learn waits, on the journal's commits rather than on time, until the agent has learnt a place
// (the slot is learnt when the throttled report's retry settles, in the burst that journals its
// acceptance), and returns its slot.
func (a *placeAgent) learn(t *testing.T) time.Duration {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		changed := a.j.Changed() // before the query: a commit in between is not missed
		if learnt := a.pace(t); learnt > 0 {
			return learnt
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("no place learnt within 10s of a report throttled with its turn")
		}
	}
}

// pace is the agent's learnt slot, asked of its loop.
func (a *placeAgent) pace(t *testing.T) time.Duration {
	t.Helper()
	var pace float64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.e.QueryWithReporting(ctx, func(_ *fsm.State, r engine.Reporting) { pace = r.PaceSeconds }); err != nil {
		t.Fatal(err)
	}
	return time.Duration(pace * float64(time.Second))
}

// A place learnt under the throttle outlives a clean restart (an upgrade): the restarted
// agent's next burst goes at the slot the throttle taught it, not at once with the whole
// fleet restarted beside it. Without the journal's meta keeping it the restarted agent's slot
// is 0.
func TestALearntPlaceOutlivesACleanRestart(t *testing.T) {
	dir := t.TempDir()
	logs := make(lines, 1024)
	first := startPlaceAgent(t, dir, throttledOnce(payloadsOf(t, 1)), logs)
	learnt := first.learn(t)
	if err := first.stop(); err != nil {
		t.Fatalf("clean stop: %v", err)
	}

	again := startPlaceAgent(t, dir, throttledOnce(nil), logs)
	if got := again.pace(t); got != learnt {
		t.Fatalf("after a clean restart the slot is %v; want the %v learnt before it", got, learnt)
	}
	if logged(logs, "submit_place") {
		t.Fatal("a warning naming submit_place while keeping or restoring the place")
	}
}

// A burst counts from when the payloads that began it reached the host, not from when a busy
// agent read them: here they arrived 3 s before the poll handed them over, and the first
// report is throttled with a turn 1 s away, so the place is 4 s from their arrival (from the
// read it would be 1 s, and a loaded host's next storm would replay it seconds off).
func TestABurstCountsFromWhenItsPayloadsReachedTheHost(t *testing.T) {
	payloads := payloadsOf(t, 1)
	payloads[0].ReceivedAt = time.Now().Add(-3 * time.Second)
	a := startPlaceAgent(t, t.TempDir(), throttledOnce(payloads), make(lines, 1024))
	if got := a.learn(t); got < 4*time.Second {
		t.Fatalf("slot %v; want at least 4 s: the payloads' arrival 3 s before the read, then the 1-s turn", got)
	}
}

// A kept place that cannot be used — damaged, hand-edited, past what an agent learns, or
// stale — is dropped with a warning naming the meta key, and the agent starts as a new one (no
// slot): the value never holds a report, and never stops the agent. The next clean stop clears
// it, so the warning is not repeated at every start.
func TestAnUnusableKeptPlaceIsDroppedWithAWarning(t *testing.T) {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	stale := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)
	for _, v := range []string{
		"slot=oops served=1s since429=0 kept=" + now,
		"slot=1s since429=0 kept=" + now,
		"slot=-1s served=0s since429=-1 kept=" + now,
		"slot=31s served=1s since429=0 kept=" + now,
		"slot=1s served=32s since429=0 kept=" + now,
		"slot=1s served=1s since429=11 kept=" + now,
		"slot=1s served=1s since429=0 kept=yesterday",
		"slot=1s served=1s since429=0 kept=" + stale,
		"served=1s slot=1s since429=0 kept=" + now + " extra=2",
		"slot=1s slot=2s served=1s since429=0 kept=" + now,
	} {
		t.Run(v, func(t *testing.T) {
			dir := t.TempDir()
			var full atomic.Bool
			j := openJournal(t, dir, &full)
			if err := j.SetMeta(context.Background(), engine.PlaceKey, v); err != nil {
				t.Fatal(err)
			}
			j.Close()
			logs := make(lines, 1024)
			a := startPlaceAgent(t, dir, throttledOnce(nil), logs)
			if got := a.pace(t); got != 0 {
				t.Fatalf("kept place %q restored as a slot of %v; want it dropped (0)", v, got)
			}
			if !logged(logs, "submit_place not restored") {
				t.Fatalf("no warning naming the meta key for kept place %q", v)
			}
			a.stop()
			again := make(lines, 1024)
			startPlaceAgent(t, dir, throttledOnce(nil), again).stop()
			if logged(again, "submit_place") {
				t.Fatalf("after a clean stop the unusable place %q is still kept", v)
			}
		})
	}
}

// A clean stop on a full disk: the place's write fails with a warning naming the key, the stop
// goes on to agent_stopped (which fails as it always has on a full disk, and says so) — no
// hang, no panic. Once the disk has room the journal opens and the agent recovers, with no
// place kept and nothing lost of what was journaled before.
func TestACleanStopOnAFullDiskKeepsNoPlaceAndLosesNothing(t *testing.T) {
	dir := t.TempDir()
	logs := make(lines, 1024)
	first := startPlaceAgent(t, dir, throttledOnce(payloadsOf(t, 1)), logs)
	first.learn(t)
	first.full.Store(true)
	if err := first.stop(); err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("a clean stop on a full disk returned %v; want agent_stopped's failed commit", err)
	}
	if !logged(logs, "submit_place not written") {
		t.Fatal("no warning naming submit_place for the place not written")
	}
	again := startPlaceAgent(t, dir, throttledOnce(nil), make(lines, 1024))
	if got := again.pace(t); got != 0 {
		t.Fatalf("after a stop whose write failed the slot is %v; want none kept", got)
	}
	var task *fsm.Task
	if err := again.e.Query(context.Background(), func(st *fsm.State) { task = st.Tasks["task/poll-000"] }); err != nil {
		t.Fatal(err)
	}
	if task == nil {
		t.Fatal("the task journaled before the full disk is gone after the restart")
	}
}

// throttledOnce is a control plane that answers the first poll with payloads, holds the rest
// until the poller cuts them, throttles the first report (1 s: the agent learns a place) and
// accepts the rest; it tells the test of each poll.
func throttledOnce(payloads []protocol.Payload) *testrig.ControlPlane {
	var reports atomic.Int32
	return &testrig.ControlPlane{Payloads: testrig.Once(payloads), Polled: make(chan int, 16),
		Answer: func(changes []protocol.StateChange) protocol.ReportResult {
			if reports.Add(1) == 1 {
				return testrig.Throttle(changes)
			}
			return testrig.SettleAll(changes)
		}}
}

// logged says whether a line the agent logged, up to now, holds s (lines: ackflood_test.go).
func logged(l lines, s string) bool {
	for {
		select {
		case line := <-l:
			if strings.Contains(line, s) {
				return true
			}
		default:
			return false
		}
	}
}
