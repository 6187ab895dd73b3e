package fsm

import (
	"errors"
	"fmt"

	"github.com/agentd/agentd/internal/event"
)

// Rule names an invariant of DESIGN.md ("What must hold, always"), as printed by
// `agentd journal verify`.
type Rule string

const (
	RuleCleanupBeforeAck Rule = "cleanup-before-stopped-acked"
	RuleRunTwice         Rule = "task-run-twice"
	RulePayloadTwice     Rule = "payload-applied-twice"
	RuleSentAhead        Rule = "sent-ahead-of-known"
	RuleStatusOrder      Rule = "illegal-transition"
	RuleStoppedOrder     Rule = "task-stopped-before-containers"
	RuleImageNotPulled   Rule = "image-removed-not-pulled"
	RuleImageInUse       Rule = "image-removed-in-use"
	RuleOther            Rule = "bad-record"
)

// Violation is one broken invariant, named by the record that broke it.
type Violation struct {
	Seq    uint64 `json:"seq"`
	Task   string `json:"task_arn,omitempty"`
	Rule   Rule   `json:"rule"`
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	task := ""
	if v.Task != "" {
		task = " task " + v.Task
	}
	return fmt.Sprintf("record %d%s: %s: %s", v.Seq, task, v.Rule, v.Detail)
}

// Checker replays a record stream through the projection and collects every violation
// instead of stopping at the first: the projection refuses what breaks a rule, the checker
// names the rule, skips the record and reads on. It is what `agentd journal verify` runs.
type Checker struct {
	State      *State
	Violations []Violation
	// compacted: a compaction_done or a hole in the sequence was read. Compaction drops the whole history of a task
	// cleaned long ago — also the pull that made an image the agent's own, while the image
	// lives on (a later task found it present) — so from then on the removal of an image
	// the replay never saw pulled is no evidence of one the agent did not pull.
	compacted bool
}

// NewChecker starts from an empty projection, or from a restored one.
func NewChecker(from *State) *Checker {
	if from == nil {
		from = New()
	}
	return &Checker{State: from}
}

// Record checks and applies one record.
func (c *Checker) Record(rec event.Record) {
	if e, ok := rec.Event.(*event.ImageRemoved); ok {
		for _, t := range c.State.SortedTasks() {
			for _, ct := range t.Containers {
				if ct.ImageID == e.ImageID {
					c.Violations = append(c.Violations, Violation{Seq: rec.Seq, Task: t.ARN, Rule: RuleImageInUse,
						Detail: fmt.Sprintf("image %s removed while container %s, not cleaned, uses it", e.ImageID, ct.Name)})
				}
			}
		}
	}
	if _, ok := rec.Event.(*event.CompactionDone); ok || rec.Seq > c.State.LastSeq+1 {
		c.compacted = true // a compaction's record, or the hole one left
	}
	if id := imageGoneID(rec.Event); id != "" && c.compacted && c.State.Images[id] == nil {
		c.State.Skip(rec) // pulled in history compaction dropped
		return
	}
	if err := c.State.Apply(rec); err != nil {
		c.Violations = append(c.Violations, Violation{Seq: rec.Seq, Task: rec.Task, Rule: classify(err), Detail: err.Error()})
		c.State.Skip(rec)
		return
	}
	c.checkState(rec)
}

// imageGoneID is the image a removal or release record ends the agent's claim on ("" for other
// records).
func imageGoneID(e event.Event) string {
	switch e := e.(type) {
	case *event.ImageRemoved:
		return e.ImageID
	case *event.ImageReleased:
		return e.ImageID
	}
	return ""
}

func classify(err error) Rule {
	switch {
	case errors.Is(err, ErrCleanupGuard):
		return RuleCleanupBeforeAck
	case errors.Is(err, ErrRunTwice):
		return RuleRunTwice
	case errors.Is(err, ErrPayloadTwice):
		return RulePayloadTwice
	case errors.Is(err, ErrSentAhead):
		return RuleSentAhead
	case errors.Is(err, ErrStoppedOrder):
		return RuleStoppedOrder
	case errors.Is(err, ErrIllegalTransition):
		return RuleStatusOrder
	case errors.Is(err, ErrImageNotPulled):
		return RuleImageNotPulled
	}
	return RuleOther
}

// checkState re-checks the touched task's statuses after a record applied: a belt to the
// machines' braces, catching a bug in Apply itself.
func (c *Checker) checkState(rec event.Record) {
	t := c.State.Tasks[rec.Task]
	if t == nil {
		return
	}
	if t.Sent.Rank() > t.Known.Rank() {
		c.Violations = append(c.Violations, Violation{Seq: rec.Seq, Task: t.ARN, Rule: RuleSentAhead,
			Detail: fmt.Sprintf("task sent status %s ahead of known %s", t.Sent, t.Known)})
	}
	for _, ct := range t.Containers {
		if ct.Sent.Rank() > ct.Known.Rank() {
			c.Violations = append(c.Violations, Violation{Seq: rec.Seq, Task: t.ARN, Rule: RuleSentAhead,
				Detail: fmt.Sprintf("container %s sent status %s ahead of known %s", ct.Name, ct.Sent, ct.Known)})
		}
	}
}
