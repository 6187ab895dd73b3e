package engine_test

import (
	"bytes"
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
)

// placeAgent is one agent process over the journal in dir: started, queried, stopped cleanly.
type placeAgent struct {
	e    *engine.Engine
	j    *journal.Journal
	stop func()
}

func startPlaceAgent(t *testing.T, dir string, cp engine.ControlPlane, logs *syncBuffer) *placeAgent {
	t.Helper()
	var full atomic.Bool
	j := openJournal(t, dir, &full)
	id, err := engine.ResolveAgentID(context.Background(), j, "agent-place")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := simruntime.Open(dir, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(engine.Config{AgentID: id, CleanupWait: time.Hour, Seed: 1}, j, rt, cp, nil, nil, zerolog.New(logs))
	if err := e.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	a := &placeAgent{e: e, j: j}
	var once sync.Once
	a.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("clean stop: %v", err)
			}
			j.Close()
		})
	}
	t.Cleanup(a.stop)
	return a
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
	var logs syncBuffer
	first := startPlaceAgent(t, dir, throttledOnce(payloadsOf(t, 1)), &logs)
	var learnt time.Duration
	for deadline := time.Now().Add(10 * time.Second); learnt == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no place learnt within 10s of a report throttled with its turn")
		}
		time.Sleep(5 * time.Millisecond) // the slot is learnt when the retry settles, in the loop
		learnt = first.pace(t)
	}
	first.stop()

	again := startPlaceAgent(t, dir, throttledOnce(nil), &logs)
	if got := again.pace(t); got != learnt {
		t.Fatalf("after a clean restart the slot is %v; want the %v learnt before it", got, learnt)
	}
	if strings.Contains(logs.String(), "submit_place") {
		t.Fatalf("a warning while keeping or restoring the place:\n%s", logs.String())
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
			var logs syncBuffer
			a := startPlaceAgent(t, dir, throttledOnce(nil), &logs)
			if got := a.pace(t); got != 0 {
				t.Fatalf("kept place %q restored as a slot of %v; want it dropped (0)", v, got)
			}
			if !strings.Contains(logs.String(), "submit_place not restored") {
				t.Fatalf("no warning naming the meta key for kept place %q:\n%s", v, logs.String())
			}
			a.stop()
			var again syncBuffer
			startPlaceAgent(t, dir, throttledOnce(nil), &again).stop()
			if strings.Contains(again.String(), "submit_place") {
				t.Fatalf("after a clean stop the unusable place %q is still kept:\n%s", v, again.String())
			}
		})
	}
}

// throttledOnce is a control plane that answers the first poll with payloads, holds the rest,
// and throttles the first report once (hostBurstCP): an agent reporting to it learns a place.
func throttledOnce(payloads []protocol.Payload) *hostBurstCP {
	return &hostBurstCP{firstPoll: firstPoll{payloads: payloads, polled: make(chan int, 8)}, stopped: make(chan int, 1)}
}

// syncBuffer is a log sink the engine's goroutines and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
