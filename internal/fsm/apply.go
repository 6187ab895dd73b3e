package fsm

import (
	"errors"
	"fmt"

	"github.com/agentd/agentd/internal/event"
)

// Apply folds one record into the projection. A record that breaks a rule changes nothing and
// returns an *ApplyError.
func (s *State) Apply(rec event.Record) error {
	if rec.Event == nil {
		return s.fail(rec, errors.New("record has no body"))
	}
	rec.Time = rec.Time.UTC() // snapshots must not depend on the caller's time zone
	if rec.Seq <= s.LastSeq {
		return s.fail(rec, fmt.Errorf("%w: %d after %d", ErrOutOfSequence, rec.Seq, s.LastSeq))
	}
	if err := s.apply(rec); err != nil {
		return s.fail(rec, err)
	}
	s.LastSeq, s.LastTime = rec.Seq, rec.Time
	return nil
}

// Skip moves past a record that Apply refused, so a checker can go on reading a damaged
// journal; the refused record changes nothing else.
func (s *State) Skip(rec event.Record) {
	if rec.Seq > s.LastSeq {
		s.LastSeq, s.LastTime = rec.Seq, rec.Time
	}
}

func (s *State) fail(rec event.Record, err error) error {
	var t event.Type
	if rec.Event != nil {
		t = rec.Event.Type()
	}
	return &ApplyError{Seq: rec.Seq, Type: t, Task: rec.Task, Container: rec.Container, Err: err}
}

func (s *State) apply(rec event.Record) error {
	switch e := rec.Event.(type) {
	case *event.AgentStarted:
		if s.AgentID != "" && e.AgentID != s.AgentID {
			return fmt.Errorf("agent id changed from %q to %q", s.AgentID, e.AgentID)
		}
		if s.JournalID != "" && e.JournalID != s.JournalID {
			return fmt.Errorf("journal id changed from %q to %q", s.JournalID, e.JournalID)
		}
		s.AgentID, s.JournalID = e.AgentID, e.JournalID
		s.Starts++
	case *event.AgentStopped, *event.SnapshotTaken, *event.ReportAttempted:
		// History for the forensics tools; no state.
	case *event.PayloadReceived:
		if e.MessageID == "" {
			return errors.New("payload without message id")
		}
		if seq, ok := s.Messages[e.MessageID]; ok {
			return fmt.Errorf("%w: message %q was received at record %d", ErrPayloadTwice, e.MessageID, seq)
		}
		s.Messages[e.MessageID] = rec.Seq
	case *event.TaskAdded:
		return s.addTask(rec, e)
	case *event.RecordRefused:
		s.refused(rec, e)
	case *event.TaskRejected:
		if err := s.newARN(rec.Task); err != nil {
			return err
		}
		t := &Task{ARN: rec.Task, Known: event.StatusStopped, Desired: event.StatusStopped, Sent: event.StatusNone,
			Reason: e.Reason, Rejected: true, AddedSeq: rec.Seq, AddedAt: rec.Time, StoppedAt: rec.Time, StopSeq: rec.Seq,
			Containers: []*Container{}}
		t.heldBy(e.MessageID)
		s.Tasks[t.ARN] = t
		s.addChange(rec, t, nil, event.StatusStopped, nil, e.Reason)
	case *event.TaskResent:
		if t, ok := s.Tasks[rec.Task]; ok {
			t.heldBy(e.MessageID) // a re-send's RUNNING retracts no stop: desired status only moves forward
			if t.Known == event.StatusStoppedAcked || t.Known == event.StatusCleaning {
				// Its STOPPED was settled, yet the control plane sends it again: it lost
				// track. Report the final STOPPED again, same ids.
				s.requeue(finalChanges(s, t))
			}
			return nil
		}
		ts, ok := s.Tombstones[rec.Task]
		if !ok {
			return fmt.Errorf("%w: re-sent task is neither live nor tombstoned", ErrUnknownTask)
		}
		s.requeue(s.tombstoneFinal(rec.Task, ts)) // the control plane lost track: the final STOPPED again, same ids
	case *event.DesiredChanged:
		t, err := s.task(rec)
		if err != nil {
			return err
		}
		if e.To != event.StatusRunning && e.To != event.StatusStopped {
			return fmt.Errorf("desired status %q: only RUNNING or STOPPED", e.To)
		}
		if e.To.Rank() <= t.Desired.Rank() {
			return fmt.Errorf("desired status moves back or stays: %s → %s", t.Desired, e.To)
		}
		t.Desired, t.DesiredSeq = e.To, rec.Seq
		if e.To == event.StatusStopped && t.StopCause == "" {
			t.StopCause = "stopped by the control plane"
		}
	case *event.ContainerTransitioned:
		return s.transitionContainer(rec, e)
	case *event.TaskTransitioned:
		return s.transitionTask(rec, e)
	case *event.HealthChanged:
		return s.healthChanged(rec, e)
	case *event.CallStarted:
		t, c, err := s.container(rec)
		if err != nil {
			return err
		}
		if ActionKind(e.Call) != ActStart || c.Known != event.StatusCreated || t.Known.Rank() >= event.StatusStopped.Rank() {
			return fmt.Errorf("%w: %s started for a container that is %s in a task that is %s (needs a CREATED container)", ErrIllegalTransition, e.Call, c.Known, t.Known)
		}
		if c.InFlight != "" {
			return fmt.Errorf("%w: %s started while %s is in flight", ErrRunTwice, e.Call, c.InFlight)
		}
		if c.RuntimeID == "" && (c.Again || c.RolledBack) {
			return fmt.Errorf("%w: %s started for a container not made again yet (its last one is gone)", ErrIllegalTransition, e.Call)
		}
		c.InFlight = ActionKind(e.Call)
		c.StartsAsked++
	case *event.CallEnded:
		_, c, err := s.container(rec)
		if err != nil {
			return err
		}
		if c.InFlight != ActionKind(e.Call) {
			return fmt.Errorf("%s ended, but the call in flight is %q", e.Call, c.InFlight)
		}
		c.InFlight = ""
	case *event.ContainerRolledBack:
		return s.rolledBack(rec, e)
	case *event.ChangesSettled:
		return s.settle(rec, e)
	case *event.StoppedAcked:
		t, err := s.task(rec)
		if err != nil {
			return err
		}
		if t.Known != event.StatusStopped || t.Sent != event.StatusStopped {
			return fmt.Errorf("%w: stopped-acked for a task that is %s with sent status %s (needs STOPPED, settled)", ErrCleanupGuard, t.Known, t.Sent)
		}
		if err := s.taskM.check(t.Known, event.StatusStoppedAcked); err != nil {
			return err
		}
		t.Known, t.AckedAt = event.StatusStoppedAcked, rec.Time
	case *event.CleanupStarted:
		t, err := s.task(rec)
		if err != nil {
			return err
		}
		if !t.CleanupAllowed() {
			return fmt.Errorf("%w: cleanup of a task that is %s (needs STOPPED_ACKED)", ErrCleanupGuard, t.Known)
		}
		if err := s.taskM.check(t.Known, event.StatusCleaning); err != nil {
			return fmt.Errorf("%w: cleanup of a task that is %s: %v", ErrCleanupGuard, t.Known, err)
		}
		t.Known, t.CleaningAt = event.StatusCleaning, rec.Time
	case *event.ContainerRemoved:
		t, c, err := s.container(rec)
		if err != nil {
			return err
		}
		if c.Removed {
			return errors.New("container removed twice")
		}
		if e.Fence {
			return fence(t, c, e)
		}
		if t.Known != event.StatusCleaning {
			return fmt.Errorf("%w: container removed while the task is %s (needs CLEANING)", ErrCleanupGuard, t.Known)
		}
		c.Removed = true
	case *event.TaskCleaned:
		return s.clean(rec)
	case *event.ImageRemoved:
		return s.imageGone(e.ImageID)
	case *event.ImageReleased:
		return s.imageGone(e.ImageID)
	case *event.CompactionDone:
		for _, arn := range e.Tasks {
			if _, live := s.Tasks[arn]; live {
				return fmt.Errorf("compaction dropped live task %s", arn)
			}
		}
		for _, arn := range e.Early {
			if _, live := s.Tasks[arn]; live {
				return fmt.Errorf("compaction dropped the history of live task %s", arn)
			}
		}
		for _, arn := range e.Tasks {
			delete(s.Tombstones, arn)
		}
		for _, arn := range e.Early {
			if ts := s.Tombstones[arn]; ts != nil {
				ts.dropHistory() // the tombstone stays: the guard still needs it
			}
		}
		for _, m := range e.Messages {
			delete(s.Messages, m)
		}
		s.forgetRefusals(e.RefusedUpTo)
	default:
		return fmt.Errorf("record type %s is not understood by the projection", rec.Event.Type())
	}
	return nil
}

func (s *State) task(rec event.Record) (*Task, error) {
	if t, ok := s.Tasks[rec.Task]; ok {
		return t, nil
	}
	if _, ok := s.Tombstones[rec.Task]; ok {
		return nil, fmt.Errorf("%w: task %q is cleaned (tombstoned)", ErrUnknownTask, rec.Task)
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownTask, rec.Task)
}

func (s *State) container(rec event.Record) (*Task, *Container, error) {
	t, err := s.task(rec)
	if err != nil {
		return nil, nil, err
	}
	c := t.Container(rec.Container)
	if c == nil {
		return nil, nil, fmt.Errorf("task has no container %q", rec.Container)
	}
	return t, c, nil
}

// newARN refuses an ARN the agent has seen: a task never runs twice.
func (s *State) newARN(arn string) error {
	if arn == "" {
		return errors.New("task without arn")
	}
	if t, ok := s.Tasks[arn]; ok {
		return fmt.Errorf("%w: live since record %d", ErrRunTwice, t.AddedSeq)
	}
	if ts, ok := s.Tombstones[arn]; ok {
		return fmt.Errorf("%w: tombstoned at record %d", ErrRunTwice, ts.CleanSeq)
	}
	return nil
}

func (s *State) addTask(rec event.Record, e *event.TaskAdded) error {
	if err := s.newARN(rec.Task); err != nil {
		return err
	}
	if e.Desired != event.StatusRunning && e.Desired != event.StatusStopped {
		return fmt.Errorf("desired status %q: only RUNNING or STOPPED", e.Desired)
	}
	if len(e.Containers) == 0 {
		return errors.New("task without containers")
	}
	t := &Task{ARN: rec.Task, Family: e.Family, Version: e.Version, Known: event.StatusNone, Desired: e.Desired,
		Sent: event.StatusNone, AddedSeq: rec.Seq, AddedAt: rec.Time}
	for _, spec := range e.Containers {
		if spec.Name == "" || t.Container(spec.Name) != nil {
			return fmt.Errorf("container name %q empty or repeated", spec.Name)
		}
		t.Containers = append(t.Containers, &Container{ContainerSpec: spec, Known: event.StatusNone, Sent: event.StatusNone})
	}
	if e.Desired == event.StatusStopped {
		t.StopCause = "desired status STOPPED on arrival"
	}
	t.heldBy(e.MessageID)
	s.Tasks[t.ARN] = t
	return nil
}

func (s *State) transitionContainer(rec event.Record, e *event.ContainerTransitioned) error {
	t, c, err := s.container(rec)
	if err != nil {
		return err
	}
	if e.From != c.Known {
		return fmt.Errorf("%w: record says container %s → %s, but the container is %s", ErrIllegalTransition, e.From, e.To, c.Known)
	}
	if t.Known.Rank() >= event.StatusStopped.Rank() {
		return fmt.Errorf("%w: container %s → %s in a task that is %s", ErrIllegalTransition, e.From, e.To, t.Known)
	}
	if err := s.containerM.check(c.Known, e.To); err != nil {
		return err
	}
	if e.From == event.StatusCreated && e.To == event.StatusCreated && (!c.RolledBack && !c.Again || c.RuntimeID != "" || e.RuntimeID == "") {
		// CREATED → CREATED is a container made again: only one the runtime rolled back, or
		// one a fence removed for that, and once for each.
		return fmt.Errorf("%w: container CREATED → CREATED without a rolled-back create or a fence to make it again", ErrIllegalTransition)
	}
	if inFlightGuard && c.InFlight != "" && e.To != event.StatusRunning && e.From != event.StatusRunning {
		// Only a start's outcome (RUNNING) or an exit after it settles a start in flight:
		// anything else would declare a container stopped that may be running.
		return fmt.Errorf("%w: container %s → %s while a %s is in flight", ErrIllegalTransition, e.From, e.To, c.InFlight)
	}
	c.Known, c.InFlight, c.Again = e.To, "", false
	if e.To != event.StatusCreated {
		c.StartsAsked = 0 // it ran, or will never run: no start of it can land unseen any more
	}
	s.ExitCursor = max(s.ExitCursor, e.Cursor)
	if e.RuntimeID != "" {
		c.RuntimeID = e.RuntimeID
	}
	if e.To == event.StatusStopped {
		c.ExitCode, c.Reason, c.StoppedAt, c.StopSeq = e.ExitCode, e.Reason, rec.Time, rec.Seq
		if (c.Essential || e.StopsTask) && t.StopCause == "" {
			t.StopCause = essentialStopped(c)
			if e.StopsTask {
				t.StopCause = e.Reason
			}
		}
	}
	if e.To == event.StatusRunning {
		c.Bindings = e.NetworkBindings
	}
	if e.To == event.StatusPulled {
		s.imagePulled(rec, c, e)
	}
	if e.From == e.To {
		return nil // made again: the control plane knows it CREATED already
	}
	s.addChange(rec, t, c, e.To, e.ExitCode, e.Reason)
	if e.To == event.StatusRunning && len(e.NetworkBindings) > 0 {
		s.Outbox[rec.Seq].NetworkBindings = e.NetworkBindings
	}
	return nil
}

// rolledBack forgets a CREATED container the runtime lost before it ever started, so that it
// is created again: once, and never one that may have run (a start in flight) or that stopped.
func (s *State) rolledBack(rec event.Record, e *event.ContainerRolledBack) error {
	t, c, err := s.container(rec)
	if err != nil {
		return err
	}
	switch {
	case t.Known.Rank() >= event.StatusStopped.Rank() || c.Known != event.StatusCreated:
		return fmt.Errorf("%w: rolled back a container that is %s in a task that is %s (needs a CREATED container)", ErrIllegalTransition, c.Known, t.Known)
	case c.InFlight != "":
		return fmt.Errorf("%w: rolled back a container while a %s is in flight: it may have run", ErrIllegalTransition, c.InFlight)
	case c.RolledBack:
		return fmt.Errorf("%w: container rolled back twice: it is made again once", ErrIllegalTransition)
	case e.RuntimeID == "" || e.RuntimeID != c.RuntimeID:
		return fmt.Errorf("%w: rolled back container %q, but the container is %q", ErrIllegalTransition, e.RuntimeID, c.RuntimeID)
	}
	c.RuntimeID, c.RolledBack, c.StartsAsked = "", true, 0 // a new container: no start of it asked
	return nil
}

// fence applies a fence: only of a container that never ran — CREATED, in a task not yet
// STOPPED — whose start was asked and none is in flight (a start in flight is settled by its
// outcome or an inspect first); any other removal before cleanup would take a container the
// control plane has not settled. One fenced to be made again (Again), only while its task is
// not stopping, is a new container from then: none in the runtime, no start of it asked.
func fence(t *Task, c *Container, e *event.ContainerRemoved) error {
	switch {
	case c.Known != event.StatusCreated || t.Known.Rank() >= event.StatusStopped.Rank():
		return fmt.Errorf("%w: fenced a container that is %s in a task that is %s (needs a CREATED container that never ran)", ErrCleanupGuard, c.Known, t.Known)
	case c.StartsAsked == 0:
		return fmt.Errorf("%w: fenced a container whose start was never asked", ErrCleanupGuard)
	case c.InFlight != "":
		return fmt.Errorf("%w: fenced a container while its %s is in flight", ErrCleanupGuard, c.InFlight)
	case e.RuntimeID == "" || e.RuntimeID != c.RuntimeID:
		return fmt.Errorf("%w: fenced container %q, but the container is %q", ErrCleanupGuard, e.RuntimeID, c.RuntimeID)
	case e.Again && t.Stopping():
		return fmt.Errorf("%w: container fenced to be made again in a task that is stopping (%s)", ErrIllegalTransition, t.StopCause)
	case e.Again:
		c.RuntimeID, c.StartsAsked, c.Again = "", 0, true
		return nil
	}
	c.Removed = true
	return nil
}

func (s *State) transitionTask(rec event.Record, e *event.TaskTransitioned) error {
	t, err := s.task(rec)
	if err != nil {
		return err
	}
	if !e.To.Reportable() {
		return fmt.Errorf("%w: task %s → %s only through its own record type", ErrCleanupGuard, e.From, e.To)
	}
	if e.From != t.Known {
		return fmt.Errorf("%w: record says task %s → %s, but the task is %s", ErrIllegalTransition, e.From, e.To, t.Known)
	}
	if err := s.taskM.check(t.Known, e.To); err != nil {
		return err
	}
	for _, c := range t.Containers {
		if e.To == event.StatusStopped && c.Known != event.StatusStopped {
			return fmt.Errorf("%w: task STOPPED while container %s is %s", ErrStoppedOrder, c.Name, c.Known)
		}
		if c.Known.Rank() < e.To.Rank() {
			return fmt.Errorf("%w: task %s while container %s is %s", ErrIllegalTransition, e.To, c.Name, c.Known)
		}
	}
	t.Known = e.To
	if e.Reason != "" {
		t.Reason = e.Reason
	}
	if e.To == event.StatusStopped {
		t.StoppedAt, t.StopSeq = rec.Time, rec.Seq
	}
	s.addChange(rec, t, nil, e.To, nil, e.Reason)
	return nil
}

// clean turns a task into its tombstone.
func (s *State) clean(rec event.Record) error {
	t, err := s.task(rec)
	if err != nil {
		return err
	}
	if err := s.taskM.check(t.Known, event.StatusCleaned); err != nil {
		return fmt.Errorf("%w: %v", ErrCleanupGuard, err)
	}
	for _, c := range t.Containers {
		if !c.Removed {
			return fmt.Errorf("task cleaned while container %s is not removed", c.Name)
		}
	}
	s.Tombstones[t.ARN] = s.tombstone(t, rec)
	for _, m := range t.Messages {
		delete(s.Messages, m) // the tombstone holds it now: heldMessage
	}
	s.imagesReleased(rec, t)
	delete(s.Tasks, t.ARN)
	return nil
}

// healthChanged applies a health verdict: of a running container, or of its task.
func (s *State) healthChanged(rec event.Record, e *event.HealthChanged) error {
	if e.Health != event.HealthHealthy && e.Health != event.HealthUnhealthy {
		return fmt.Errorf("health %q: only HEALTHY or UNHEALTHY", e.Health)
	}
	if rec.Container == "" {
		t, err := s.task(rec)
		if err != nil {
			return err
		}
		t.Health = e.Health
		s.addHealthChange(rec, t, nil, e.Health)
		return nil
	}
	t, c, err := s.container(rec)
	if err != nil {
		return err
	}
	if c.Known != event.StatusRunning {
		return fmt.Errorf("health of a container that is %s (needs RUNNING)", c.Known)
	}
	c.Health = e.Health
	s.addHealthChange(rec, t, c, e.Health)
	return nil
}
