package simulation

// The invariants: after every step, no task cleaned before the control plane accepted its
// STOPPED, nothing STOPPED that runs, nothing run or created twice, no protocol violation, no
// image of a live task removed; at the end, everything settled and the control plane's record
// the journal's.

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/model"
)

// bugHook counts the engine's error lines: a record the projection refused after the engine
// journaled it is a bug the run must not hide.
type bugHook struct{ s *sim }

func (h bugHook) Run(e *zerolog.Event, level zerolog.Level, msg string) {
	if strings.HasPrefix(msg, "BUG") {
		h.s.bugs++
		h.s.log("engine: %s", msg)
	}
}

// check runs after every step: the guard, STOPPED means stopped, and nothing run twice.
func (s *sim) check() {
	if s.bugs > 0 {
		s.fail("the projection refused %d records the engine journaled", s.bugs)
		return
	}
	view, _ := s.cp.Snapshot()
	st := s.e.State()
	cleaned := func(arn string) {
		if v := view[arn]; v.Status != "STOPPED" {
			s.fail("GUARD: %s cleaned up while the control plane has it %q, not STOPPED", arn, v.Status)
		}
	}
	for _, t := range st.SortedTasks() { // in order: the failure names the same task every run
		if t.Known == event.StatusCleaning {
			cleaned(t.ARN)
		}
		for _, c := range t.Containers {
			// What the projection holds STOPPED may be reported STOPPED: the runtime must
			// have nothing of it running (invariant 7).
			if c.Known != event.StatusStopped || c.RuntimeID == "" {
				continue
			}
			if rs, err := s.rt.Inspect(context.Background(), c.RuntimeID); err == nil && rs.Running {
				s.fail("STOPPED BUT RUNNING: %s/%s is STOPPED in the journal while the runtime runs it", t.ARN, c.Name)
			}
		}
	}
	tombs := make([]string, 0, len(st.Tombstones))
	for arn := range st.Tombstones {
		tombs = append(tombs, arn)
	}
	slices.Sort(tombs)
	for _, arn := range tombs {
		cleaned(arn)
	}
	want := int(s.countMadeAgain())
	for _, n := range s.expected {
		want += n
	}
	if r := s.rt.Reruns(); len(r) > 0 {
		s.fail("RUN TWICE: container %s was started more than once", r[0])
	}
	if got := s.rt.Created(); got > int64(want) {
		s.fail("RUN TWICE: the runtime created %d containers for %d in valid tasks", got, want)
	}
	if v := s.cp.Violations(); len(v) > 0 {
		s.fail("the control plane saw a protocol violation: %+v", v[0])
	}
	s.checkImages()
}

// settle stops the faults, assigns what is left, and lets everything run to the end: every
// task cleaned, every change settled, the control plane agreeing with the journal.
func (s *sim) settle() {
	s.faults, s.throttled, s.diskFull = false, false, false
	s.log("faults stop")
	for len(s.assigned) < s.o.Tasks {
		s.assign()
	}
	for _, arn := range s.assigned {
		_ = s.cp.StopTask(arn)
	}
	for i := 0; i < 20000 && s.res.Failure == ""; i++ {
		st := s.e.State()
		if len(st.Tasks) == 0 && st.OutboxLen() == 0 && len(st.Tombstones) == len(s.assigned) && s.cp.Unacknowledged(agentID) == 0 {
			break
		}
		if i%10 == 0 {
			s.poll()
		}
		if !s.runWork() && !s.feedExits() {
			s.advance(5 * time.Second)
		}
		s.check()
	}
	if s.res.Failure != "" {
		return
	}
	if n := s.cp.Unacknowledged(agentID); n > 0 {
		s.fail("PAYLOAD STALLED: %d payloads never acknowledged", n)
		return
	}
	st := s.e.State()
	if len(st.Tasks) > 0 || st.OutboxLen() > 0 || len(st.Tombstones) != len(s.assigned) {
		s.fail("did not settle: %d live, %d unsent, %d tombstones of %d tasks", len(st.Tasks), st.OutboxLen(), len(st.Tombstones), len(s.assigned))
		return
	}
	view, _ := s.cp.Snapshot()
	arns := make([]string, 0, len(view))
	for arn := range view {
		arns = append(arns, arn)
	}
	slices.Sort(arns)
	for _, arn := range arns {
		if view[arn].Status != "STOPPED" && !s.unkeyed[arn] {
			s.fail("the control plane has %s %q at the end", arn, view[arn].Status)
		}
	}
	// The control plane's exit codes are the journal's.
	err := s.j.Iterate(1, func(r event.Record) error {
		if e, ok := r.Event.(*event.ContainerTransitioned); ok && e.To == event.StatusStopped && e.ExitCode != nil {
			if c := view[r.Task].Containers[r.Container]; c == nil || c.ExitCode == nil || *c.ExitCode != *e.ExitCode {
				s.fail("%s/%s: journal says exit %d, control plane %v", r.Task, r.Container, *e.ExitCode, c)
			}
		}
		return nil
	})
	if err != nil {
		s.fail("journal: %v", err)
	}
	// The journal, read by the independent model of the protocol (internal/model).
	if err := model.Check(s.j); err != nil {
		s.fail("MODEL: %v", err)
	}
	s.log("settled: %d tasks cleaned, %d records", len(s.assigned), s.j.LastSeq())
}

// countMadeAgain reads the records journaled since the last call and counts the fences among
// them that make a container again (container_removed again=true).
func (s *sim) countMadeAgain() uint64 {
	if s.j == nil || s.j.LastSeq() <= s.madeAgainSeq {
		return s.madeAgain
	}
	_ = s.j.Iterate(s.madeAgainSeq+1, func(r event.Record) error {
		if e, ok := r.Event.(*event.ContainerRemoved); ok && e.Again {
			s.madeAgain++
		}
		s.madeAgainSeq = r.Seq
		return nil
	})
	return s.madeAgain
}
