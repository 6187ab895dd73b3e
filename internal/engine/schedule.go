package engine

import (
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// schedule is when the loop hands the node a task again by time alone: the deadlines the
// node's Ready asked for (cleanup deadlines and the core's wakes), one heap and one timer for
// all of them, and the wait after the journal refused a commit. It guards that every deadline
// the node asked for comes back to it as a Tick, and that a full disk is not met again at once.
type schedule struct {
	due dueHeap // cleanup deadlines of STOPPED_ACKED tasks, and the core's wakes
	// journalRetry is when the node's left-over decisions (and the exits kept) go in again
	// after the journal refused a burst, rather than meet a full disk at once.
	journalRetry time.Time
}

// takeDue pops every task whose deadline has come.
func (s *schedule) takeDue(now time.Time) []string {
	var due []string
	for top, ok := s.due.peek(); ok && !top.at.After(now); top, ok = s.due.peek() {
		s.due.pop()
		due = append(due, top.arn)
	}
	return due
}

// reset empties the heap, for a projection rebuilt from the journal: every task is decided
// again, and asks for its wakes again.
func (s *schedule) reset() { s.due = dueHeap{} }

// keepWakes puts the deadlines a Ready asked for in the heap, in its order: a cleanup
// deadline (from the journaled stop time) gets jitter, so tasks stopped together are not
// cleaned in one storm.
func (e *Engine) keepWakes(wakes []fsm.Wake) {
	for _, w := range wakes {
		at := w.At
		if w.Cleanup {
			at = e.cleanupJitter(at)
		}
		e.sched.due.push(dueEntry{at: at, arn: w.Task})
	}
}

func (e *Engine) cleanupJitter(due time.Time) time.Time {
	if e.cfg.CleanupJitter > 0 {
		due = due.Add(time.Duration(e.rng.Int64N(int64(e.cfg.CleanupJitter))))
	}
	return due
}

// scheduleCleanups puts every STOPPED_ACKED task's cleanup deadline in the heap, in ARN order
// (cleanup jitter is drawn per task): at recovery, and after a rebuild from the journal.
func (e *Engine) scheduleCleanups() {
	for _, t := range e.st.SortedTasks() {
		if t.Known == event.StatusStoppedAcked {
			e.sched.due.push(dueEntry{at: e.cleanupJitter(t.CleanupDue(e.fcfg())), arn: t.ARN})
		}
	}
}
