package engine

import (
	"slices"
	"time"

	"github.com/agentd/agentd/internal/fsm"
)

// schedule is which tasks the loop decides again, and when: now (dirty: touched since the
// last decision), or at a time (due: cleanup deadlines and the core's wakes, one heap and one
// timer for all of them). It guards that every task whose decisions may have changed is
// decided again — by a record, an outcome, or time alone — and that nothing else is.
type schedule struct {
	dirty map[string]bool      // tasks touched since the last decision
	due   dueHeap              // cleanup deadlines of STOPPED_ACKED tasks, and the core's wakes
	wakes map[string]time.Time // the core's last wake pushed per task (fsm.Wake), so a wake is pushed once
	// journalRetry is when to decide again after the journal refused a burst: the dirty set
	// (and the exits kept) wait until then rather than meet a full disk at once.
	journalRetry time.Time
}

func newSchedule() schedule {
	return schedule{dirty: map[string]bool{}, wakes: map[string]time.Time{}}
}

// mark makes a task decided again in this burst.
func (s *schedule) mark(arn string) { s.dirty[arn] = true }

// takeDue marks every task whose deadline has come.
func (s *schedule) takeDue(now time.Time) {
	for top, ok := s.due.peek(); ok && !top.at.After(now); top, ok = s.due.peek() {
		s.due.pop()
		s.dirty[top.arn] = true
	}
}

// wake puts a time at which the core's decisions for a task change by time alone (a
// dependency's start_timeout_s running out, counted from the task's journaled arrival) in the
// heap. Decide asks for the same wake each time it looks at the task: it is pushed once.
// A restart pushes it again from the first decisions after recovery, which cover every task.
func (s *schedule) wake(w fsm.Wake) {
	if at, ok := s.wakes[w.Task]; ok && at.Equal(w.At) {
		return
	}
	s.wakes[w.Task] = w.At
	s.due.push(dueEntry{at: w.At, arn: w.Task})
}

// forget drops what the schedule kept about a cleaned task.
func (s *schedule) forget(arn string) { delete(s.wakes, arn) }

// reset empties the heap and the wakes, for a projection rebuilt from the journal: every task
// is decided again, and asks for its wakes again.
func (s *schedule) reset() {
	s.due = dueHeap{}
	clear(s.wakes)
}

// scheduleCleanup puts a STOPPED_ACKED task's cleanup deadline (from its journaled stop time,
// plus jitter so tasks stopped together are not cleaned in one storm) in the heap.
func (e *Engine) scheduleCleanup(t *fsm.Task) {
	due := t.CleanupDue(e.fcfg())
	if e.cfg.CleanupJitter > 0 {
		due = due.Add(time.Duration(e.rng.Int64N(int64(e.cfg.CleanupJitter))))
	}
	e.sched.due.push(dueEntry{at: due, arn: t.ARN})
}

// sortedDirty drains the dirty set in ARN order (determinism), leaving out quarantined tasks:
// nothing more is decided for them (quarantine.go).
func (e *Engine) sortedDirty() []string {
	out := make([]string, 0, len(e.sched.dirty))
	for a := range e.sched.dirty {
		if e.quarantine.of(a) == "" {
			out = append(out, a)
		}
	}
	clear(e.sched.dirty)
	slices.Sort(out)
	return out
}

// markAll makes every live task decided again.
func (e *Engine) markAll() {
	for arn := range e.st.Tasks {
		e.sched.mark(arn)
	}
}
