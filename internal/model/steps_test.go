package model

// The mapping covers the vocabulary: a record type added to the event package without a step
// here fails this test, and a type the model does not know is a violation, never a panic.

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/event"
)

func TestEveryRecordTypeHasAStep(t *testing.T) {
	for _, typ := range event.Types() {
		if steps[typ] == nil {
			t.Errorf("record type %s (%d) has no step in the model: map it in steps.go (to none if it changes nothing the model checks)", typ, typ)
		}
	}
	if len(steps) != len(event.Types()) {
		t.Errorf("%d steps for %d record types", len(steps), len(event.Types()))
	}
}

type unknownEvent struct{}

func (unknownEvent) Type() event.Type { return 999 }

func TestARecordTypeWithoutAStepIsAViolation(t *testing.T) {
	m := New()
	m.Step(event.Record{Seq: 1, Task: "task/a", Event: unknownEvent{}})
	m.Step(event.Record{Seq: 2})
	v := m.Violations()
	if len(v) != 2 || v[0].Rule != RuleNoStep || v[0].Seq != 1 || v[1].Rule != RuleNoStep || v[1].Seq != 2 {
		t.Fatalf("violations %v; want the two records named, rule %q", v, RuleNoStep)
	}
}

// The model is a second reading only while it shares no code with the projection.
func TestTheModelSharesNoCodeWithTheProjection(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasSuffix(pkg, "/internal/fsm") || strings.HasSuffix(pkg, "/internal/engine") || strings.HasSuffix(pkg, "/internal/submit") {
			t.Fatalf("the model depends on %s: it must read journals on its own", pkg)
		}
	}
}

// After a compaction a settle may name a change whose record was cut (a tombstoned task's
// final STOPPED, re-sent): not a violation. One naming a kept record that made no change is.
func TestASettleOfACutRecordIsNoViolation(t *testing.T) {
	m := New()
	m.Step(event.Record{Seq: 1, Event: &event.AgentStarted{JournalID: "j1"}})
	m.Step(event.Record{Seq: 5, Event: &event.AgentStarted{JournalID: "j1"}}) // 2..4 cut
	m.Step(event.Record{Seq: 9, Event: &event.AgentStopped{}})                // 6..8 cut
	m.Step(event.Record{Seq: 10, Event: &event.ChangesSettled{Accepted: []string{"c-j1-3", "c-j1-7"}}})
	if v := m.Violations(); len(v) != 0 {
		t.Fatalf("settles of cut records: %v", v)
	}
	m.Step(event.Record{Seq: 11, Event: &event.ChangesSettled{Accepted: []string{"c-j1-5"}}})
	if v := m.Violations(); len(v) != 1 || v[0].Rule != RuleSentAhead || v[0].Seq != 11 {
		t.Fatalf("a settle of kept record 5, which made no change: %v", v)
	}
}
