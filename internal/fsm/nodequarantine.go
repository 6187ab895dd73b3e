package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentd/agentd/internal/event"
)

// A record the projection refuses is a bug in the core: the core decided it from a
// projection that does not allow it. One policy holds for every such record, so that a bug
// never becomes an agent that cannot restart:
//
//   - It is never journaled: the node drops it from its Ready, so the journal only ever holds
//     records Load accepts, and every restart succeeds (a journaled refused record made every
//     later Recover fail).
//   - The task it concerns is quarantined: the node makes no further runtime call for it and
//     decides nothing more for it, because every later decision would be made on a state the
//     core misjudged. Facts about it from outside (exits, report answers) are still recorded
//     when the projection accepts them, and its changes are still reported.
//   - The rest of the agent goes on; the caller names the quarantined tasks (Ready.Dropped,
//     QuarantineProblem) in its health and metrics.
//
// The quarantine lives in memory: after a restart the core decides the task afresh, from a
// journal that never held the refused record. But a refused record made from a payload (it
// carries a message id: a task_added, a desired status change) is replaced in the Ready by a
// record_refused naming the task, the payload and the reason — never the task's definition
// (PROTOCOL.md §5) — because the payload is acknowledged all the same (withholding the ack
// would have the control plane re-send it forever): without it, after a restart the task would
// be lost in silence. A refused desired status change is offered again at the next start
// (Reoffered).

// errDecidedWithRefused drops the records decided in the same verdict as a refused record of
// their task: they were decided together, on the state the refused one would have made.
var errDecidedWithRefused = errors.New("decided together with a refused record of its task")

// Dropped is a record the projection refused, dropped from the Ready: Err says why; StandInErr
// is set when even its record_refused was refused (the payload's task is named only until a
// restart).
type Dropped struct {
	Record     event.Record
	Err        error
	StandInErr error
}

// quarantine is the tasks a refused record concerned, and the last refusal of a record
// without a task. It guards that nothing more is decided or called for a quarantined task.
type quarantine struct {
	tasks    map[string]string // why each task is quarantined (made at the first refusal)
	taskless string            // the last refused record without a task
}

func (q *quarantine) of(arn string) string { return q.tasks[arn] }

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

// Quarantined is why a task is quarantined ("" when it is not).
func (n *Node) Quarantined(arn string) string { return n.quarantine.of(arn) }

// QuarantineProblem words the quarantine for a health slot: every quarantined task, by ARN,
// then the last refusal of a record without a task ("": none).
func (n *Node) QuarantineProblem() string {
	q := &n.quarantine
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
// record_refused, to journal in its place (ok false: nothing to journal).
func (n *Node) refuse(rec event.Record, err error) (standIn event.Record, ok bool) {
	typ := "bodiless"
	if rec.Event != nil {
		typ = rec.Event.Type().String()
	}
	n.quarantine.add(rec, typ, err)
	d := Dropped{Record: rec, Err: err}
	defer func() { n.rd.Dropped = append(n.rd.Dropped, d) }()
	m := ""
	if rec.Event != nil {
		m = event.MessageOf(rec.Event)
	}
	if m == "" {
		return event.Record{}, false
	}
	reason := err.Error()
	if ae := (*ApplyError)(nil); errors.As(err, &ae) {
		reason = ae.Err.Error() // the record's seq, type and task are the stand-in's own
	}
	rr := &event.RecordRefused{MessageID: m, Record: typ, Reason: reason}
	if dc, ok := rec.Event.(*event.DesiredChanged); ok {
		rr.Desired = dc.To // offered to the core again after a restart (Reoffered)
	}
	standIn = event.Record{Seq: rec.Seq, Time: rec.Time, Task: rec.Task, Container: rec.Container, Event: rr}
	if err := n.st.Apply(standIn); err != nil {
		d.StandInErr = err
		return event.Record{}, false
	}
	return standIn, true
}
