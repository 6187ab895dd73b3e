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
)

// An agent that has met the throttle, handed one stop of five tasks, reports their STOPPED
// changes in one request: the first report of the burst waits while the stops are still out
// (submit's gathering), rather than going with the first task's changes and spending a second
// of the fleet's tokens on the rest (the bench's storm: 30 of 200 agents reported 2 changes,
// then 18).
func TestAStopOfManyTasksIsReportedInOneRequest(t *testing.T) {
	r := newRig(t, time.Second)
	var reports [][]protocol.StateChange
	answers := []func([]protocol.StateChange) protocol.ReportResult{acceptAll, throttle} // then acceptAll
	r.cp.answer = func(changes []protocol.StateChange) protocol.ReportResult {
		reports = append(reports, changes)
		if len(answers) > 0 {
			a := answers[0]
			answers = answers[1:]
			return a(changes)
		}
		return acceptAll(changes)
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
		t.Fatalf("the agent was not throttled (%d answers left): the test needs it to have met the throttle", len(answers))
	}
	before := len(reports)
	// One payload stops all five.
	var tasks []json.RawMessage
	for _, arn := range arns {
		raw, _ := json.Marshal(protocol.Task{ARN: arn, DesiredStatus: "STOPPED", Containers: []protocol.Container{ctr("app")}})
		tasks = append(tasks, raw)
	}
	done := make(chan error, 1)
	r.e.Step(context.Background(), engine.PollInput{Payloads: []protocol.Payload{{MessageID: "m-stop", Tasks: tasks}}, Done: done})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.advance(time.Minute)
	for _, arn := range arns {
		if got := r.known(arn); got != event.StatusStopped && got != event.StatusCleaned {
			t.Fatalf("%s is %s after the stop; want its STOPPED settled", arn, got)
		}
	}
	if n := len(reports) - before; n != 1 {
		var sizes []int
		for _, rep := range reports[before:] {
			sizes = append(sizes, len(rep))
		}
		t.Fatalf("the stop of 5 tasks went in %d requests of %v changes; want one", n, sizes)
	}
}
