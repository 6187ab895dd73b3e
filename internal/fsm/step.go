package fsm

import (
	"encoding/json"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
)

// Input is something that happened outside the projection, as plain data: what the control
// plane sent, what a runtime call did, what the runtime reported by itself, what the control
// plane answered, what the runtime holds after a restart, a compaction that finished. Step
// turns each into the records that say so. The engine journals and applies those records and
// makes none of its own from an input, so every rule that maps the world into the journal lives
// here, where the scripts and property tests exercise the very code the daemon runs.
type Input interface{ isInput() }

// PayloadArrived is a payload from the control plane, tasks still raw, and the task rules it
// is read by (the host's allowed bind roots; the zero Rules allow none).
type PayloadArrived struct {
	MessageID string
	Tasks     []json.RawMessage
	Rules     protocol.Rules
}

// ActionFinished is what a runtime call for an action came to.
type ActionFinished struct {
	Action Action
	Result Result
}

// ResultKind classifies a runtime call's outcome. The engine sorts the runtime's errors into
// these; the projection decides what each means for the container.
type ResultKind string

const (
	Succeeded   ResultKind = "ok"          // the call did what it was asked
	Failed      ResultKind = "failed"      // the call failed for this container
	Unavailable ResultKind = "unavailable" // the runtime did not answer: nothing is known
	Unknown     ResultKind = "unknown"     // the call timed out, or the runtime refused a second start: it may have taken effect
	Vanished    ResultKind = "vanished"    // the container is gone from the runtime
	Refused     ResultKind = "refused"     // image removal: another name or a container not the agent's holds the image, which stays
)

// Result is a runtime call's outcome.
type Result struct {
	Kind      ResultKind
	RuntimeID string // create: the new container's id
	Running   bool   // inspect: the container runs
	Exited    bool   // start, stop and inspect: the container has run and ended, with ExitCode
	ExitCode  int
	OOMKilled bool // it ended killed for going over its memory limit
	// Ran: a start that answered with an error, yet the runtime shows the container has run
	// (it ended before the answer), started at StartedAt.
	Ran       bool
	StartedAt time.Time
	Bindings  []event.NetworkBinding // start and inspect: the host ports bound for it
	Err       string                 // Failed, Unavailable and Refused: the cause
	// Pull: the image the reference resolved to, whether this call fetched it from a
	// registry (its id was absent before), whether the reference named it before the call,
	// and a note worth reporting (a cached image used after a failed pull).
	ImageID, ImageDigest string
	ImagePulled          bool
	ImageRefExisted      bool
	Note                 string
}

// ContainerExited is an exit from the runtime's event stream.
type ContainerExited struct {
	Task, Container, RuntimeID string
	ExitCode                   int
	OOMKilled                  bool   // killed for going over its memory limit
	Reason                     string // what the runtime says of the cause ("": nothing)
	Cursor                     int64  // the stream's position, journaled so a restart resumes there
}

// HealthObserved is a verdict of a container's health check, from the runtime's stream of
// them (which repeats current verdicts on every subscription).
type HealthObserved struct {
	Task, Container, RuntimeID string
	Health                     event.Health
}

// ReportAnswered is what the control plane settled of a report, as the submitter read it.
type ReportAnswered struct {
	Sent    []protocol.StateChange
	Settled *event.ChangesSettled  // nil: nothing settled
	Attempt *event.ReportAttempted // nil: nothing to journal about the attempt
}

// RuntimeObserved is what the runtime holds of this agent's containers after a restart: every
// container it lists, plus those the projection knows by id that the runtime said it lacks.
type RuntimeObserved struct {
	Containers []Observed
}

// Observed is one container as the runtime showed it.
type Observed struct {
	ID, Task, Container string
	Running, Exited     bool
	ExitCode            int
	OOMKilled           bool
	Bindings            []event.NetworkBinding // the host ports bound for it while it runs
	Gone                bool                   // asked for by id: the runtime has no such container
}

// Saw puts what the runtime showed of the call's container into its outcome.
func (r *Result) Saw(o Observed) {
	r.Running, r.Exited, r.ExitCode, r.OOMKilled, r.Bindings = o.Running, o.Exited, o.ExitCode, o.OOMKilled, o.Bindings
}

// CompactionFinished is a compaction of the journal that has run; its compaction_done records
// (doneRecords) close it.
type CompactionFinished struct {
	Done *event.CompactionDone
}

func (PayloadArrived) isInput()     {}
func (ActionFinished) isInput()     {}
func (ContainerExited) isInput()    {}
func (ReportAnswered) isInput()     {}
func (RuntimeObserved) isInput()    {}
func (CompactionFinished) isInput() {}
func (HealthObserved) isInput()     {}
func (Reoffered) isInput()          {}

// Verdict is what an input comes to: the records to journal (stamped now, not yet numbered)
// and what the engine must know besides.
type Verdict struct {
	Records []event.Record
	// Duplicate: a payload whose message id the journal holds: acknowledge it again, apply
	// nothing.
	Duplicate bool
	// Skipped: tasks of a payload that cannot be recorded at all (no usable ARN), each with
	// its problem, for the log.
	Skipped []string
	// Retry: the action's outcome says nothing about the container (the runtime is down, or a
	// stop failed): run it again after a backoff.
	Retry bool
	// Hold: an exit that came before its container's start was journaled: hand it in again
	// once the start is (heldExitAfter).
	Hold bool
	// SitOut: an image removal the runtime refused with an error: the image sits out the
	// collection cycles for ImageSitOut (planImageCycle).
	SitOut bool
	// Strangers: containers of this agent the projection does not know, for the log; they are
	// left alone.
	Strangers []Observed
}

// Step maps one input to its records, reading the projection only: the same projection, now
// and input always give the same verdict.
func (s *State) Step(now time.Time, in Input) Verdict {
	var v Verdict
	switch in := in.(type) {
	case PayloadArrived:
		v = s.payload(in)
	case ActionFinished:
		v = s.actionFinished(in)
	case ContainerExited:
		v = s.exited(in)
	case ReportAnswered:
		v.Records = settledByTask(in)
	case RuntimeObserved:
		v = s.reconcile(in)
	case HealthObserved:
		v.Records = s.health(in)
	case Reoffered:
		v.Records = s.reoffer()
	case CompactionFinished:
		if in.Done != nil {
			v.Records = doneRecords(in.Done)
		}
	}
	for i := range v.Records {
		v.Records[i].Time = now
	}
	return v
}
