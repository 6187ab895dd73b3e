package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/simruntime"
	"github.com/agentd/agentd/internal/testrig"
)

// polling is a control plane that answers the first poll with payloads and holds every later
// one until the agent stops; it tells the test of each poll and, on the channel returned, of
// each acknowledgement.
func polling(payloads []protocol.Payload) (*testrig.ControlPlane, chan []string) {
	acked := make(chan []string, 4)
	return &testrig.ControlPlane{Payloads: testrig.Once(payloads), Polled: make(chan int, 4),
		Acks: func(ids []string) error { acked <- ids; return nil }}, acked
}

func payloadsOf(t *testing.T, n int) []protocol.Payload {
	t.Helper()
	out := make([]protocol.Payload, n)
	for i := range out {
		raw, err := json.Marshal(protocol.Task{ARN: fmt.Sprintf("task/poll-%03d", i), DesiredStatus: "RUNNING",
			Containers: []protocol.Container{{Name: "app", Image: "x", Command: []string{"exit", "0"}}}})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = protocol.Payload{MessageID: fmt.Sprintf("msg-%03d", i), Tasks: []json.RawMessage{raw}}
	}
	return out
}

// runAgent recovers agent name over a fresh journal and the simulated runtime and runs it
// against cp until the test ends. opened, when given, sees the journal before the engine
// starts; with diskFull, every commit after the recovery fails as on a full disk.
func runAgent(t *testing.T, name string, cp engine.ControlPlane, diskFull bool, opened func(*journal.Journal)) *journal.Journal {
	t.Helper()
	dir := t.TempDir()
	var full atomic.Bool
	j := openJournal(t, dir, &full)
	if opened != nil {
		opened(j)
	}
	id, err := engine.ResolveAgentID(context.Background(), j, name)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := simruntime.Open(dir, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(engine.Config{AgentID: id, CleanupWait: time.Hour, Seed: 1}, j, rt, cp, nil, nil, zerolog.Nop())
	if err := e.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	full.Store(diskFull)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		j.Close()
	})
	return j
}

// waitFor receives from c within a bound, naming what the test waited for.
func waitFor[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
		panic("unreachable")
	}
}

// A poll's payloads are journaled in one burst: one commit for all of them, not one each.
// Handing them to the loop one at a time, each waiting for its commit, made admitting tasks
// cost a commit per task — the lifecycle benchmark's 1.9 commits a task, half of them that.
func TestPollIsJournaledInOneCommit(t *testing.T) {
	cp, acked := polling(payloadsOf(t, 50))
	var commits func() uint64
	var at atomic.Uint64 // commits when the first poll was answered
	answer := cp.Payloads
	cp.Payloads = func(ctx context.Context, wait time.Duration) ([]protocol.Payload, error) {
		if cp.Polls() == 1 {
			at.Store(commits())
		}
		return answer(ctx, wait)
	}
	runAgent(t, "agent-poll", cp, false, func(j *journal.Journal) {
		commits = func() uint64 { return j.Stats().Commits }
	})
	waitFor(t, cp.Polled, "first poll")
	ids := waitFor(t, acked, "acknowledgement")
	// The poller acknowledges once the commit holding the payloads has returned; by then
	// the loop may have committed a burst of the decisions they led to as well, not more.
	if len(ids) != 50 {
		t.Fatalf("acknowledged %d payloads; want all 50 at once", len(ids))
	}
	if n := commits() - at.Load(); n > 3 {
		t.Fatalf("%d commits between the poll's answer and its acknowledgement; want the payloads in one (a commit each makes 50)", n)
	}
}

// A poll whose commit fails is acknowledged not at all: its payloads are journaled all or
// none, so none is journaled behind a later one of the same poll, and the control plane sends
// them again.
func TestPollThatCannotBeJournaledIsNotAcknowledged(t *testing.T) {
	cp, acked := polling(payloadsOf(t, 3))
	j := runAgent(t, "agent-poll", cp, true, nil)
	waitFor(t, cp.Polled, "first poll")
	waitFor(t, cp.Polled, "the poll after the failed commit") // the poller backed off and asked again
	select {
	case ids := <-acked:
		t.Fatalf("acknowledged %v though nothing was journaled", ids)
	default:
	}
	err := j.Iterate(0, func(r event.Record) error {
		if r.Task != "" {
			return fmt.Errorf("record %d of task %s journaled though the poll's commit failed", r.Seq, r.Task)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A hostile or confused control plane puts the same payload twice in one poll: it is applied
// once (PROTOCOL.md §2) — the second is a duplicate of the first within the very burst — and
// both are acknowledged, with the payload after them.
func TestPollWithAPayloadTwiceAppliesItOnce(t *testing.T) {
	ps := payloadsOf(t, 2)
	cp, acked := polling([]protocol.Payload{ps[0], ps[0], ps[1]})
	j := runAgent(t, "agent-poll", cp, false, nil)
	waitFor(t, cp.Polled, "first poll")
	if ids := waitFor(t, acked, "acknowledgement"); len(ids) != 3 || ids[0] != "msg-000" || ids[1] != "msg-000" || ids[2] != "msg-001" {
		t.Fatalf("acknowledged %v; want msg-000 twice, then msg-001", ids)
	}
	count := map[string]int{}
	_ = j.Iterate(0, func(r event.Record) error {
		switch e := r.Event.(type) {
		case *event.PayloadReceived:
			count[e.MessageID]++
		case *event.TaskAdded:
			count[r.Task]++
		}
		return nil
	})
	for _, k := range []string{"msg-000", "msg-001", "task/poll-000", "task/poll-001"} {
		if count[k] != 1 {
			t.Fatalf("%s journaled %d times; want once (all: %v)", k, count[k], count)
		}
	}
}

func refused([]protocol.StateChange) protocol.ReportResult {
	return protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("dial tcp 127.0.0.1:8080: connect: connection refused")}
}

// A successful poll after an outage starts the reporter at once: the report backoff grown
// while nothing answered ends with the control plane's first answer, not when it runs out —
// the outage drain was 3.7–4.8× its floor when only an accepted report reset it.
func TestAnsweredPollStartsTheReporter(t *testing.T) {
	r := newRig(t, time.Hour)
	r.cp.Answer = refused
	r.assign("task/a", "RUNNING", ctr("app"))
	r.advance(2 * time.Minute) // the outage: every report refused, the backoff grown to its cap
	if wait := r.e.NextWake().Sub(r.clock.Now()); wait < 5*time.Second {
		t.Fatalf("after two minutes of refused reports the next try is %v away; the test needs a grown backoff", wait)
	}
	tried := len(r.cp.Sent())
	r.cp.Answer = testrig.SettleAll
	r.e.Step(context.Background(), engine.PollInput{}) // a poll answered, empty
	r.settle()
	if len(r.cp.Sent()) == tried {
		t.Fatalf("the reporter still waits %v after a successful poll", r.e.NextWake().Sub(r.clock.Now()))
	}
	for _, c := range r.cp.Sent()[tried:] {
		if r.cp.Accepted()[c.ID] != 1 {
			t.Fatalf("change %s accepted %d times; want once", c.ID, r.cp.Accepted()[c.ID])
		}
	}
}

// An agent whose containers exit after a quiet spell, its report waiting for the slot it
// learnt under the throttle, cuts the long poll it began before and polls afresh before that
// report goes: a long poll begun before a hanging outage is answered as ever after it, and an
// agent with no request out in the hang would never learn of it and report at its slot counted
// from the burst, into the seconds the agents that saw the hang take from the return (bench
// fleet's hanging outage: herd 2.8–3.0). The control plane here holds every poll after the
// first until it is cut: without the cut no third poll ever comes.
func TestContainersExitingAfterAQuietSpellMakeTheAgentPollAfresh(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(protocol.Task{ARN: "task/exits", DesiredStatus: "RUNNING",
		Containers: []protocol.Container{{Name: "app", Image: "x", Command: []string{"sleep", "6s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cp := throttledOnce([]protocol.Payload{{MessageID: "msg-exits", Tasks: []json.RawMessage{raw}}})
	stopped := make(chan int, 1) // polls so far when the first report carrying a STOPPED arrived
	var stoppedSeen atomic.Bool
	answer := cp.Answer
	cp.Answer = func(changes []protocol.StateChange) protocol.ReportResult {
		for _, c := range changes {
			if c.Status == "STOPPED" && !stoppedSeen.Swap(true) {
				stopped <- cp.Polls()
			}
		}
		return answer(changes)
	}
	runAgent(t, "agent-exits", cp, false, nil)
	waitFor(t, cp.Polled, "first poll")
	waitFor(t, cp.Polled, "the long poll after the payloads")
	if n := waitFor(t, stopped, "the report of the exited container"); n < 3 {
		t.Fatalf("the exited container's STOPPED was reported with %d polls made; want the long poll begun before the exit cut and a third begun", n)
	}
}
