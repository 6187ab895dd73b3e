package engine

import (
	"sync"
	"sync/atomic"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
)

// inbox is how inputs reach the loop: the goroutines that hand them in (the poller, the exit
// and health watchers, the executor's work), counted by wg, send on in; queries run on the
// loop's goroutine. It guards that the projection has one owner: nothing outside the loop
// touches it except through a query, and none is taken before recovery ends (ready).
type inbox struct {
	in       chan Input
	queries  chan query
	answered chan struct{} // a report was answered: the poller's backoff is over (poller.go)
	poll     livePoll      // the poll in flight, which the loop may cut (poller.go)
	ready    atomic.Bool   // recovery has finished and the loop runs
	// backlog is how many tasks wait for a removal slot, published by the loop at each
	// burst's end for the poller (intake.go); drained tells the poller it fell under the bound.
	backlog atomic.Int64
	drained chan struct{}
	wg      sync.WaitGroup
	// stopping is set, by the loop, once Run shuts down: wg is waited for, so work started on
	// the executor then would outlive Run and race the journal's close. Nothing starts.
	stopping bool
}

type query struct {
	f    func(*fsm.State)
	done chan struct{}
}

// Input is something that happened, for the loop to hand to the core.
type Input interface{ isInput() }

// PayloadInput is a payload from the poller; Done receives nil once it is journaled (or was
// journaled before), and the journal's error otherwise.
type PayloadInput struct {
	Payload protocol.Payload
	Done    chan error
}

// PollInput is the payloads of one poll, from the poller: journaled in one burst, in order,
// all or none; Done receives nil once they are journaled, and the journal's error otherwise.
// Empty (no payloads, no Done), it says a poll was answered: the control plane is there.
type PollInput struct {
	Payloads []protocol.Payload
	Done     chan error
	// Outage: the poll before this one failed to reach the control plane; the reporter places
	// its next report by its slot from now (submit.Answered).
	Outage bool
	// Held: that poll was held before it failed, a hanging outage cut at its return
	// (submit.Hung).
	Held bool
}

// ActionResult is a finished runtime call, its outcome already sorted by kind.
type ActionResult struct {
	Action fsm.Action
	Result fsm.Result
}

// ExitInput is a container exit from the runtime's event stream.
type ExitInput struct{ Exit runtime.Exit }

// HealthInput is a verdict from the runtime's stream of health check verdicts.
type HealthInput struct{ Change runtime.HealthChange }

func (HealthInput) isInput() {}

// ReportInput is the answer to a state-change report.
type ReportInput struct {
	Sent   []protocol.StateChange
	Result protocol.ReportResult
}

// CompactInput is a finished compaction and the record that closes it.
type CompactInput struct {
	Done *event.CompactionDone
	Err  error
}

// ReconcileInput is what the runtime holds, asked again after it did not answer at recovery.
type ReconcileInput struct {
	Observed []fsm.Observed
	Err      error
}

func (ReconcileInput) isInput() {}
func (PayloadInput) isInput()   {}
func (PollInput) isInput()      {}
func (ActionResult) isInput()   {}
func (ExitInput) isInput()      {}
func (ReportInput) isInput()    {}
func (CompactInput) isInput()   {}
