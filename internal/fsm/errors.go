package fsm

import (
	"errors"
	"fmt"

	"github.com/agentd/agentd/internal/event"
)

// ApplyError is a record the projection refused. It names the record, its type and subject.
type ApplyError struct {
	Seq       uint64
	Type      event.Type
	Task      string
	Container string
	Err       error
}

func (e *ApplyError) Error() string {
	subj := ""
	if e.Task != "" {
		subj = ", task " + e.Task
	}
	if e.Container != "" {
		subj += ", container " + e.Container
	}
	return fmt.Sprintf("record %d (%s%s): %v", e.Seq, e.Type, subj, e.Err)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// Errors Apply wraps, for callers that sort violations.
var (
	ErrUnknownTask   = errors.New("unknown task")
	ErrRunTwice      = errors.New("would run twice") // a task added again, or a second start while one is out
	ErrPayloadTwice  = errors.New("payload applied twice")
	ErrCleanupGuard  = errors.New("cleanup guard")
	ErrSentAhead     = errors.New("settles a change that was never made")
	ErrOutOfSequence = errors.New("record out of sequence")
	ErrStoppedOrder  = errors.New("task stopped before its containers")

	// ErrIllegalTransition is wrapped by every transition the lifecycle tables refuse.
	ErrIllegalTransition = errors.New("illegal transition")
)
