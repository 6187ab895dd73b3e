package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// A record the projection refuses is a bug in the core: the node drops it and quarantines its
// task (the policy and its reasons: fsm/nodequarantine.go). The engine names it: in the log,
// in agentd_core_refused_records_total, on /v1/tasks, and in the health slots. The core slot (unhealthy) names what this process quarantined and refused. A refusal
// remembered from before the restart is named in the core_refusals slot, degraded only: its
// task was decided afresh, nothing is stuck, and an agent unhealthy until the retention ends
// would be restarted in a loop by a liveness probe. A refused desired status change (a stop)
// is not lost with the restart: its record_refused carries the status asked for and Recover
// offers it to the core again (reoffer), once per start; refused again, it is a refusal of
// this process.

// dropped logs and counts a record the node refused and dropped (fsm/nodequarantine.go).
func (e *Engine) dropped(d fsm.Dropped) {
	e.metrics.coreRefused.Inc()
	rec, typ := d.Record, "bodiless"
	if rec.Event != nil {
		typ = rec.Event.Type().String()
	}
	e.log.Error().Err(d.Err).Str("type", typ).Str("task", rec.Task).Str("container", rec.Container).
		Msg("BUG: the projection refused a record the core made; dropped before the commit, its task quarantined")
	if d.StandInErr != nil {
		e.log.Error().Err(d.StandInErr).Str("task", rec.Task).Msg("BUG: the projection refused a record_refused; the payload's task is named only until a restart")
	}
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
	if q := e.node.QuarantineProblem(); q != "" {
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
func (e *Engine) Quarantined(arn string) string { return e.node.Quarantined(arn) }

// reoffer hands the core again, at a start, the refused desired status changes the journal
// remembers (fsm.Reoffered): recorded like a payload's change, they are decided on the restored
// projection (the task's stop follows), and one refused again is refused again, in this
// process.
func (e *Engine) reoffer() {
	now := e.clock.Now()
	n := len(e.node.Ready().Records)
	_ = e.node.Step(now, fsm.Reoffered{})
	for _, r := range e.node.Ready().Records[n:] {
		e.log.Warn().Str("task", r.Task).Str("record", event.Describe(r.Event)).
			Msg("a desired status change the core refused before this start is offered to it again")
	}
}
