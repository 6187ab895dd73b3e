// Package model is a second, independent reading of the protocol: a small model of what the
// control plane was told and settled, what the runtime was asked to do, and what was cleaned,
// built from a journal's records alone. It shares no code with the projection (internal/fsm),
// so the agent cannot agree with itself by mistake: every journal the tests write, and any an
// operator hands `agentd journal verify --model`, is checked against it.
//
// It protects the promises of DESIGN.md "What must hold" that a journal can show: no cleanup
// before the control plane settled the task's STOPPED (1), no task run twice and no payload
// applied twice (2), per task the statuses settled in order and a task's STOPPED only after
// its containers' (4), nothing reported STOPPED while it runs or a start is in flight, no
// container started twice nor after its STOPPED (7), and sent never ahead of known nor going
// back. A violation names the record (sequence number, type, task) and the rule it breaks.
package model

import (
	"fmt"
	"sort"

	"github.com/agentd/agentd/internal/event"
)

// Rule names a promise the model checks.
type Rule string

const (
	RuleCleanupBeforeSettled Rule = "cleanup before the control plane settled the task's STOPPED"
	RuleStartedTwice         Rule = "container started twice"
	RuleStartAfterStopped    Rule = "container started after its STOPPED"
	RuleStoppedWhileRunning  Rule = "STOPPED while a container runs or a call is in flight"
	RuleTaskStoppedFirst     Rule = "task STOPPED before its containers"
	RulePayloadTwice         Rule = "payload applied twice"
	RuleTaskTwice            Rule = "task run twice"
	RuleSentAhead            Rule = "sent ahead of known"
	RuleSentBackwards        Rule = "sent goes back"
	RuleStatusOrder          Rule = "statuses out of order"
	RuleUnknownSubject       Rule = "record names a task or container never assigned"
	RuleNoStep               Rule = "record type the model has no step for"
)

// Violation is one broken rule, named by the record that broke it.
type Violation struct {
	Seq       uint64
	Type      event.Type
	Task      string
	Container string
	Rule      Rule
	What      string
}

func (v Violation) String() string {
	subject := v.Task
	if v.Container != "" {
		subject += "/" + v.Container
	}
	if subject != "" {
		subject = " " + subject
	}
	return fmt.Sprintf("record %d (%s%s): %s: %s", v.Seq, v.Type, subject, v.Rule, v.What)
}

// subject is what a change reports on: a task, or one of its containers.
type subject struct{ task, container string }

// change is a status (or health) the journal queued for the control plane, under the id
// derived from the sequence number of the record that made it.
type change struct {
	subject
	status event.Status
	health bool
	// settled: the control plane listed it in an answer (accepted or rejected for good).
	settled bool
}

type container struct {
	known      event.Status
	inFlight   string // the call whose intent is journaled and whose outcome is not
	intents    int    // starts asked for (call_started), each journaled before the call
	starts     int    // start outcomes journaled (RUNNING): the runtime started it; at most 1
	rolledBack bool   // the runtime lost its create once
	// again: it has no container — the runtime lost it (rolled back), or a fence removed it to
	// make it again — until one CREATED → CREATED makes the next; no start before that.
	again     bool
	asked     bool   // a start of this container (this create) was asked: it may land late
	fenced    bool   // removed before it ran (container_removed fence) and not made again: it never runs
	essential bool   // its STOPPED stops its task
	stopSeq   uint64 // the record that made its STOPPED change
}

type task struct {
	desired    event.Status
	known      event.Status
	containers map[string]*container
	names      []string // in assignment order
	stopSeq    uint64   // the record that made the task's STOPPED change
	stopping   string   // why it is on its way down (desired STOPPED, an essential container STOPPED): nothing is made again
	settled    bool     // the control plane settled that STOPPED change
	acked      bool     // stopped_acked journaled
	cleaning   bool
	cleaned    bool // a tombstone: never run again
}

// Model is the state built from the records stepped so far, and what they broke.
type Model struct {
	journalID string
	last      uint64
	gaps      [][2]uint64 // sequence ranges a compaction cut: changes there are unknowable
	tasks     map[string]*task
	payloads  map[string]uint64 // message id → the record that received it
	changes   map[uint64]*change
	// latest is the newest settled status change per subject (its record's sequence number).
	latest     map[subject]uint64
	violations []Violation
	records    int
}

// New is a model before any record.
func New() *Model {
	return &Model{tasks: map[string]*task{}, payloads: map[string]uint64{}, changes: map[uint64]*change{}, latest: map[subject]uint64{}}
}

// Violations are the rules broken so far, in record order.
func (m *Model) Violations() []Violation { return m.violations }

// Records is how many records were stepped.
func (m *Model) Records() int { return m.records }

// Tasks is how many tasks the model knows (live and tombstoned).
func (m *Model) Tasks() int { return len(m.tasks) }

// Step folds one record into the model. It never panics on a record it cannot place: that is
// a violation naming it.
func (m *Model) Step(rec event.Record) {
	m.records++
	if rec.Event == nil {
		m.violations = append(m.violations, Violation{Seq: rec.Seq, Task: rec.Task, Container: rec.Container, Rule: RuleNoStep, What: "record has no body"})
		return
	}
	if rec.Seq <= m.last {
		m.breaks(rec, RuleStatusOrder, "sequence number %d after %d", rec.Seq, m.last)
		return
	}
	if rec.Seq > m.last+1 {
		m.gaps = append(m.gaps, [2]uint64{m.last + 1, rec.Seq - 1})
	}
	m.last = rec.Seq
	step, ok := steps[rec.Event.Type()]
	if !ok {
		m.breaks(rec, RuleNoStep, "the model cannot check this journal past it")
		return
	}
	step(m, rec)
}

func (m *Model) breaks(rec event.Record, rule Rule, format string, args ...any) {
	v := Violation{Seq: rec.Seq, Task: rec.Task, Container: rec.Container, Rule: rule, What: fmt.Sprintf(format, args...)}
	if rec.Event != nil {
		v.Type = rec.Event.Type()
	}
	m.violations = append(m.violations, v)
}

// cut reports whether record seq was dropped by a compaction (it lies in a gap). Gaps come in
// sequence order: a binary search, as a long-lived host's journal holds many cuts.
func (m *Model) cut(seq uint64) bool {
	i := sort.Search(len(m.gaps), func(i int) bool { return m.gaps[i][1] >= seq })
	return i < len(m.gaps) && seq >= m.gaps[i][0]
}

// taskOf is the record's task, or nil with the violation said.
func (m *Model) taskOf(rec event.Record) *task {
	t := m.tasks[rec.Task]
	if t == nil {
		m.breaks(rec, RuleUnknownSubject, "no task %q was assigned", rec.Task)
	}
	return t
}

// containerOf is the record's task and container, or nils with the violation said.
func (m *Model) containerOf(rec event.Record) (*task, *container) {
	t := m.taskOf(rec)
	if t == nil {
		return nil, nil
	}
	c := t.containers[rec.Container]
	if c == nil {
		m.breaks(rec, RuleUnknownSubject, "task has no container %q", rec.Container)
		return nil, nil
	}
	return t, c
}

// queue records the change a record made for the control plane.
func (m *Model) queue(rec event.Record, s subject, status event.Status, health bool) {
	m.changes[rec.Seq] = &change{subject: s, status: status, health: health}
}

// stopped reports whether the task reached STOPPED or beyond.
func (t *task) stopped() bool { return t.stopSeq != 0 }
