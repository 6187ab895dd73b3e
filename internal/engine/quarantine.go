package engine

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
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
// journal that never held the refused record. But a refused record made from a payload (it
// carries a message id: a task_added, a desired status change) is replaced in the burst by a
// record_refused naming the task, the payload and the reason — never the task's definition
// (PROTOCOL.md §5) — because the payload is acknowledged all the same (withholding the ack
// would have the control plane re-send it forever): without it, after a restart the task would
// be lost in silence, the control plane believing the agent has it. The projection keeps the
// refusals until the retention ends (fsm/refused.go); a re-send of the payload is
// acknowledged and not applied again, a later payload with the task is decided afresh.
//
// The core slot (unhealthy) names what this process quarantined and refused. A refusal
// remembered from before the restart is named in the core_refusals slot, degraded only: its
// task was decided afresh, nothing is stuck, and an agent unhealthy until the retention ends
// would be restarted in a loop by a liveness probe. A refused desired status change (a stop)
// is not lost with the restart: its record_refused carries the status asked for and Recover
// offers it to the core again (reoffer), once per start; refused again, it is a refusal of
// this process.

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

// refuse drops a record the projection refused and quarantines its task. A record made from a
// payload gets a stand-in, applied and numbered like the refused one would have been: its
// record_refused, for the burst to journal in its place (ok false: nothing to journal).
func (e *Engine) refuse(rec event.Record, err error) (standIn event.Record, ok bool) {
	e.metrics.coreRefused.Inc()
	typ := "bodiless"
	if rec.Event != nil {
		typ = rec.Event.Type().String()
	}
	e.log.Error().Err(err).Str("type", typ).Str("task", rec.Task).Str("container", rec.Container).
		Msg("BUG: the projection refused a record the core made; dropped before the commit, its task quarantined")
	e.quarantine.add(rec, typ, err)
	defer e.coreHealth()
	m := ""
	if rec.Event != nil {
		m = event.MessageOf(rec.Event)
	}
	if m == "" {
		return event.Record{}, false
	}
	reason := err.Error()
	if ae := (*fsm.ApplyError)(nil); errors.As(err, &ae) {
		reason = ae.Err.Error() // the record's seq, type and task are the stand-in's own
	}
	rr := &event.RecordRefused{MessageID: m, Record: typ, Reason: reason}
	if dc, ok := rec.Event.(*event.DesiredChanged); ok {
		rr.Desired = dc.To // offered to the core again after a restart (fsm.Reoffered)
	}
	standIn = event.Record{Seq: rec.Seq, Time: rec.Time, Task: rec.Task, Container: rec.Container, Event: rr}
	if err := e.st.Apply(standIn); err != nil {
		e.log.Error().Err(err).Str("task", rec.Task).Str("message", m).Msg("BUG: the projection refused a record_refused; the payload's task is named only until a restart")
		return event.Record{}, false
	}
	return standIn, true
}

// maxNamedRefusals bounds the refusals a slot words: the newest, and how many more.
const maxNamedRefusals = 5

// coreHealth sets the core slots. The core slot (unhealthy) names what this process
// quarantined: the tasks, then the refusals journaled since Recover. The core_refusals slot
// (degraded only) names the refusals the journal remembers from before it: their tasks are
// decided afresh (a refused stop offered again), nothing is stuck, and a refusal that kept the
// agent unhealthy until its retention ended — a week, with no way to clear it — would have a
// liveness probe restart it in a loop. Each slot clears when it has nothing to name.
func (e *Engine) coreHealth() {
	var parts []string
	if q := e.quarantine.problem(); q != "" {
		parts = append(parts, q)
	}
	i, _ := slices.BinarySearchFunc(e.st.Refusals, e.recoveredAt+1, func(r fsm.Refusal, seq uint64) int { return cmp.Compare(r.Seq, seq) })
	remembered, now := e.st.Refusals[:i], e.st.Refusals[i:] // newest last: those from before Recover first
	parts = append(parts, e.refusalsProblem(now)...)
	if len(parts) == 0 {
		e.clearHealth(HealthCore)
	} else {
		e.setHealth(HealthCore, strings.Join(parts, "; "))
	}
	e.SetDegraded(HealthCoreRefusals, strings.Join(e.refusalsProblem(remembered), "; "))
}

// refusalsProblem words refusals, newest first, at most maxNamedRefusals, then how many more.
func (e *Engine) refusalsProblem(refusals []fsm.Refusal) []string {
	var parts []string
	for i := len(refusals) - 1; i >= 0 && i >= len(refusals)-maxNamedRefusals; i-- {
		parts = append(parts, e.refusalProblem(refusals[i]))
	}
	if n := len(refusals) - maxNamedRefusals; n > 0 {
		parts = append(parts, fmt.Sprintf("%d older refusals (agentd journal dump --type %s)", n, event.TypeRecordRefused))
	}
	return parts
}

// refusalProblem words one refusal: whose payload, which record, why, and whether the task
// is known now (a task whose task_added was refused and not sent again never ran).
func (e *Engine) refusalProblem(r fsm.Refusal) string {
	subject := "a payload"
	if r.Task != "" {
		subject = "task " + event.Printable(r.Task)
	}
	msg := fmt.Sprintf("%s: payload %s acknowledged, its %s refused by the core at record %d: %s",
		subject, event.Printable(r.MessageID), event.Printable(r.Record), r.Seq, event.PrintableText(r.Reason))
	if r.Desired != "" {
		msg += fmt.Sprintf(" (it asked desired %s)", r.Desired)
	}
	if r.Task != "" && e.st.Tasks[r.Task] == nil && e.st.Tombstones[r.Task] == nil {
		msg += "; never run"
	}
	return msg
}

// Quarantined is why a task is quarantined ("" when it is not). Call it on the loop's
// goroutine: inside a Query, or between steps of a single-goroutine driver.
func (e *Engine) Quarantined(arn string) string { return e.quarantine.of(arn) }

// reoffer hands the core again, at a start, the refused desired status changes the journal
// remembers (fsm.Reoffered): recorded like a payload's change, they are decided on the restored
// projection (the task's stop follows), and one refused again is refused again, in this
// process.
func (e *Engine) reoffer() {
	recs := e.st.Step(e.clock.Now(), fsm.Reoffered{}).Records
	for _, r := range recs {
		e.log.Warn().Str("task", r.Task).Str("record", event.Describe(r.Event)).
			Msg("a desired status change the core refused before this start is offered to it again")
	}
	e.record(recs...)
}
