package fsm

import (
	"context"
	"errors"
	"fmt"

	lfsm "github.com/looplab/fsm"

	"github.com/agentd/agentd/internal/event"
)

// The lifecycles as looplab/fsm tables. An event is named after the status it leads to, so a
// journaled transition "from → to" is checked by firing event "to" in state "from". The tables
// say what may follow what, and are the one place the lifecycle is written: the task's steps
// on its way up (nextUp) are read from them; which of the allowed moves the core makes next is
// decide.go's, and apply.go narrows CREATED → CREATED to after a rollback or a fence made to
// make the container again.
//
// Task:      NONE → PULLED → CREATED → RUNNING → STOPPED → STOPPED_ACKED → CLEANING → CLEANED,
//
//	and STOPPED from any status before it (a failed pull, create or start).
//
// Container: NONE → PULLED → CREATED → RUNNING → STOPPED, and STOPPED from any status before it;
// CREATED → CREATED, for a container made again: once after the runtime rolled it back before
// it started, and once after each fence that removed it to be made again.
//
// STOPPED_ACKED has STOPPED as its only source and CLEANING has STOPPED_ACKED as its only
// source: that is the cleanup guard, structurally.
var (
	taskEvents = lfsm.Events{
		{Name: string(event.StatusPulled), Src: []string{"NONE"}, Dst: "PULLED"},
		{Name: string(event.StatusCreated), Src: []string{"PULLED"}, Dst: "CREATED"},
		{Name: string(event.StatusRunning), Src: []string{"CREATED"}, Dst: "RUNNING"},
		{Name: string(event.StatusStopped), Src: []string{"NONE", "PULLED", "CREATED", "RUNNING"}, Dst: "STOPPED"},
		{Name: string(event.StatusStoppedAcked), Src: []string{"STOPPED"}, Dst: "STOPPED_ACKED"},
		{Name: string(event.StatusCleaning), Src: cleaningSources(), Dst: "CLEANING"},
		{Name: string(event.StatusCleaned), Src: []string{"CLEANING"}, Dst: "CLEANED"},
	}
	containerEvents = lfsm.Events{
		{Name: string(event.StatusPulled), Src: []string{"NONE"}, Dst: "PULLED"},
		// CREATED → CREATED: made again after the runtime rolled its create back, or after a
		// fence removed it to be (apply.go allows it only after a container_rolled_back or a
		// container_removed again=true).
		{Name: string(event.StatusCreated), Src: []string{"PULLED", "CREATED"}, Dst: "CREATED"},
		{Name: string(event.StatusRunning), Src: []string{"CREATED"}, Dst: "RUNNING"},
		{Name: string(event.StatusStopped), Src: []string{"NONE", "PULLED", "CREATED", "RUNNING"}, Dst: "STOPPED"},
	}
)

// nextUp is a task's next step on its way up to RUNNING, by status: read from the task table,
// the transition from a status to the one ranked next above it (event.Status.Rank), up to
// RUNNING; everything after RUNNING the core decides from settlements and acknowledgements.
var nextUp = upSteps(taskEvents)

func upSteps(evs lfsm.Events) map[event.Status]event.Status {
	up := map[event.Status]event.Status{}
	for _, ev := range evs {
		to := event.Status(ev.Dst)
		if to.Rank() > event.StatusRunning.Rank() {
			continue
		}
		for _, src := range ev.Src {
			if from := event.Status(src); from.Rank()+1 == to.Rank() {
				up[from] = to
			}
		}
	}
	return up
}

func cleaningSources() []string {
	if !ackGuard {
		return []string{"STOPPED_ACKED", "STOPPED"} // the seed's bug: with the CleanupAfterAck guard off only
	}
	return []string{"STOPPED_ACKED"}
}

// machine checks transitions against one table. One instance per projection: looplab/fsm is
// stateful and locks, and a projection is used from one goroutine.
type machine struct {
	kind string
	m    *lfsm.FSM
}

func newTaskMachine() *machine {
	return &machine{kind: "task", m: lfsm.NewFSM("NONE", taskEvents, nil)}
}

func newContainerMachine() *machine {
	return &machine{kind: "container", m: lfsm.NewFSM("NONE", containerEvents, nil)}
}

// check reports whether from → to is legal. The context is never cancelled: a cancelled
// context wedges a looplab machine for good.
func (mc *machine) check(from, to event.Status) error {
	if !to.Valid() {
		return fmt.Errorf("%w: %q is not a status", ErrIllegalTransition, to)
	}
	mc.m.SetState(string(from))
	// A self-transition the table lists is legal; looplab answers it with NoTransitionError.
	if err := mc.m.Event(context.Background(), string(to)); err != nil && !errors.As(err, &lfsm.NoTransitionError{}) {
		return fmt.Errorf("%w: %s %s → %s", ErrIllegalTransition, mc.kind, from, to)
	}
	return nil
}

// Diagram draws the task and container lifecycles in Mermaid, straight from the tables.
func Diagram() (string, error) {
	t, err := lfsm.VisualizeWithType(lfsm.NewFSM("NONE", taskEvents, nil), lfsm.MermaidStateDiagram)
	if err != nil {
		return "", err
	}
	c, err := lfsm.VisualizeWithType(lfsm.NewFSM("NONE", containerEvents, nil), lfsm.MermaidStateDiagram)
	return "%% task\n" + t + "\n%% container\n" + c, err
}
