package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/testrig"
)

// An agent that has met the throttle, handed one stop of five tasks, reports their STOPPED
// changes in one request: the first report of the burst waits while the stops are still out
// (submit's gathering), rather than going with the first task's changes and spending a second
// of the fleet's tokens on the rest (the bench's storm: 30 of 200 agents reported 2 changes,
// then 18).
func TestAStopOfManyTasksIsReportedInOneRequest(t *testing.T) {
	r := newRig(t, time.Second)
	var reports [][]protocol.StateChange
	answers := []func([]protocol.StateChange) protocol.ReportResult{testrig.SettleAll, testrig.Throttle} // then SettleAll
	r.cp.Answer = func(changes []protocol.StateChange) protocol.ReportResult {
		reports = append(reports, changes)
		if len(answers) > 0 {
			a := answers[0]
			answers = answers[1:]
			return a(changes)
		}
		return testrig.SettleAll(changes)
	}
	// Met the throttle: a follow-up answered 429 (no slot learnt: the agent reports at once).
	r.assign("task/w1", "RUNNING", ctr("app"))
	r.assign("task/w2", "RUNNING", ctr("app"))
	var arns []string
	for i := 0; i < 5; i++ {
		arns = append(arns, fmt.Sprintf("task/%d", i))
		r.assign(arns[i], "RUNNING", ctr("app"))
	}
	r.advance(time.Minute)
	for _, arn := range arns {
		if got := r.known(arn); got != event.StatusRunning {
			t.Fatalf("%s is %s before the stop; want RUNNING", arn, got)
		}
	}
	if len(answers) != 0 {
		t.Fatalf("the agent was not throttled (%d answers left): the test needs it to have met the testrig.Throttle", len(answers))
	}
	before := len(reports)
	onePayload(t, r, "m-stop", "STOPPED", arns...) // stops all five
	r.advance(time.Minute)
	for _, arn := range arns {
		if got := r.known(arn); got != event.StatusStopped && got != event.StatusCleaned {
			t.Fatalf("%s is %s after the stop; want its STOPPED settled", arn, got)
		}
	}
	if n := len(reports) - before; n != 1 {
		t.Fatalf("the stop of 5 tasks went in %d requests of %v changes; want one", n, sizes(reports[before:]))
	}
}

// A start of two tasks whose runtime ends the calls in another order than they were made (the
// last one made ends first): task B is up while A's first call is still out, and as that call
// ends, A's next is decided in the same burst, out only once its commit returns. The report
// chosen in that burst counts it as coming, so the new agent's first report waits and carries
// both tasks (with only the calls already out it saw none, and sent B's change alone: bench
// fleet's start round, 20 agents reporting 10 changes and then 1).
func TestAStartIsReportedInOneRequestWhenTheNextCallIsDecidedAsOneEnds(t *testing.T) {
	r := newRig(t, time.Second)
	var reports [][]protocol.StateChange
	r.cp.Answer = func(changes []protocol.StateChange) protocol.ReportResult {
		reports = append(reports, changes)
		return testrig.SettleAll(changes)
	}
	// The runtime ends the last call made first: each takes less than the one before.
	shorter := time.Duration(0)
	r.exec.Latency = func() time.Duration { shorter -= time.Millisecond; return shorter }
	onePayload(t, r, "m-start", "RUNNING", "task/a", "task/b")
	for i := 0; r.exec.Len() > 0; i++ {
		if i == 1000 {
			t.Fatal("the start did not settle in 1,000 calls")
		}
		r.e.Step(context.Background(), r.exec.Next()())
	}
	r.advance(time.Minute)
	for _, arn := range []string{"task/a", "task/b"} {
		if got := r.known(arn); got != event.StatusRunning {
			t.Fatalf("%s is %s; want RUNNING", arn, got)
		}
	}
	if len(reports) != 1 {
		t.Fatalf("the start of 2 tasks went in %d requests of %v changes; want one", len(reports), sizes(reports))
	}
}

// onePayload hands the engine one poll's payload of the tasks (one container each), all with
// the desired status, and waits for it to be journaled.
func onePayload(t *testing.T, r *rig, id, desired string, arns ...string) {
	t.Helper()
	var tasks []json.RawMessage
	for _, arn := range arns {
		raw, _ := json.Marshal(protocol.Task{ARN: arn, DesiredStatus: desired, Containers: []protocol.Container{ctr("app")}})
		tasks = append(tasks, raw)
	}
	done := make(chan error, 1)
	r.e.Step(context.Background(), engine.PollInput{Payloads: []protocol.Payload{{MessageID: id, Tasks: tasks}}, Done: done})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// sizes is how many changes each report carried.
func sizes(reports [][]protocol.StateChange) []int {
	var n []int
	for _, rep := range reports {
		n = append(n, len(rep))
	}
	return n
}
