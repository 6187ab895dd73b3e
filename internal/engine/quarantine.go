package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentd/agentd/internal/event"
)

// A record the projection refuses is a bug in the core (or the engine): the core decided it
// from a projection that does not allow it. One policy holds for every such record, so that a
// bug never becomes an agent that cannot restart:
//
//   - It is never journaled: the burst drops it before its commit, so the journal only ever
//     holds records Load accepts, and every restart succeeds (a journaled refused record made
//     every later Recover fail).
//   - The task it concerns is quarantined: the engine makes no further runtime call for it and
//     decides nothing more for it, because every later decision would be made on a state the
//     core misjudged. Facts about it from outside (exits, report answers) are still journaled
//     when the projection accepts them, and its changes are still reported.
//   - The rest of the agent goes on. The `core` health slot names every quarantined task (it
//     is stuck, and an operator must look), /v1/tasks shows it, and
//     agentd_core_refused_records_total counts the refusals.
//
// The quarantine lives in memory: after a restart the core decides the task afresh, from a
// journal that never held the refused record.

// errDecidedWithRefused drops the records decided in the same verdict as a refused record of
// their task: they were decided together, on the state the refused one would have made.
var errDecidedWithRefused = errors.New("decided together with a refused record of its task")

// quarantine is the tasks a refused record concerned, and the last refusal of a record
// without a task. It guards that nothing more is decided or called for a quarantined task.
type quarantine struct {
	tasks    map[string]string // why each task is quarantined (made at the first refusal)
	taskless string            // the last refused record without a task
}

// of is why a task is quarantined ("" when it is not).
func (q *quarantine) of(arn string) string { return q.tasks[arn] }

// add quarantines the task of a refused record (or notes a refusal without a task).
func (q *quarantine) add(rec event.Record, typ string, err error) {
	if q.tasks == nil {
		q.tasks = map[string]string{} // reads of a nil map are ""
	}
	if rec.Task == "" {
		q.taskless = fmt.Sprintf("a %s record refused: %v", typ, err)
	} else if _, ok := q.tasks[rec.Task]; !ok {
		q.tasks[rec.Task] = fmt.Sprintf("quarantined: the core made a %s record the projection refused (%v); no further actions for this task", typ, err)
	}
}

// problem words the core slot: every quarantined task, by ARN, then the last refusal of a
// record without a task.
func (q *quarantine) problem() string {
	arns := make([]string, 0, len(q.tasks))
	for arn := range q.tasks {
		arns = append(arns, arn)
	}
	slices.Sort(arns)
	var parts []string
	if len(arns) > 0 {
		parts = append(parts, "tasks stuck in quarantine after the core made a record the projection refused: "+strings.Join(arns, ", "))
	}
	if q.taskless != "" {
		parts = append(parts, q.taskless)
	}
	return strings.Join(parts, "; ")
}

// refuse drops a record the projection refused and quarantines its task.
func (e *Engine) refuse(rec event.Record, err error) {
	e.metrics.coreRefused.Inc()
	typ := "bodiless"
	if rec.Event != nil {
		typ = rec.Event.Type().String()
	}
	e.log.Error().Err(err).Str("type", typ).Str("task", rec.Task).Str("container", rec.Container).
		Msg("BUG: the projection refused a record the core made; dropped before the commit, its task quarantined")
	e.quarantine.add(rec, typ, err)
	e.setHealth(HealthCore, e.quarantine.problem())
}

// Quarantined is why a task is quarantined ("" when it is not). Call it on the loop's
// goroutine: inside a Query, or between steps of a single-goroutine driver.
func (e *Engine) Quarantined(arn string) string { return e.quarantine.of(arn) }
