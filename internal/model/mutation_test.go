package model_test

// Each mutation of a clean life breaks one promise; the model must name the record where it
// first breaks and the rule. A model that accepts one of these proves nothing by accepting
// the journals the suites write.

import (
	"slices"
	"testing"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/model"
)

func TestTheModelRejectsEachBrokenPromise(t *testing.T) {
	t.Setenv(model.TallyEnv, "") // planted journals, rejected on purpose: not the suites' to count
	const a, app = "task/a", "app"
	startAgain := entry{label: "start again", task: a, container: app, ev: &event.CallStarted{Call: "start"}}
	for _, tc := range []struct {
		name string
		life life
		rule model.Rule
		at   string // the label of the record named first
	}{
		{name: "cleanup precedes the accept", rule: model.RuleCleanupBeforeSettled, at: "acked",
			life: cleanLife().moveAfter("settle stop", "cleaned")},
		{name: "cleanup without stopped-acked", rule: model.RuleCleanupBeforeSettled, at: "cleanup",
			life: cleanLife().replace("acked", entry{label: "acked", ev: &event.AgentStopped{}})},
		{name: "a container started twice", rule: model.RuleStartedTwice, at: "start again",
			life: cleanLife().insertAfter("running", startAgain)},
		{name: "a start while a start is in flight", rule: model.RuleStartedTwice, at: "start again",
			life: cleanLife().insertAfter("start", startAgain)},
		{name: "RUNNING twice", rule: model.RuleStartedTwice, at: "running again",
			life: cleanLife().insertAfter("running", entry{label: "running again", task: a, container: app, ev: ct(event.StatusRunning, event.StatusRunning)})},
		{name: "a start after the container's STOPPED", rule: model.RuleStartAfterStopped, at: "start again",
			life: cleanLife().insertAfter("stopped", startAgain)},
		{name: "a sent status ahead of known", rule: model.RuleSentAhead, at: "settle stop",
			life: cleanLife().moveAfter("settle stop", "task running")},
		{name: "a settle naming a record that made no change", rule: model.RuleSentAhead, at: "settle run",
			life: cleanLife().replace("settle run", entry{label: "settle run", settles: []string{"start", "task running"}})},
		{name: "sent goes back", rule: model.RuleSentBackwards, at: "settle late",
			life: cleanLife().replace("settle run", entry{label: "settle run", settles: []string{"task running"}}).
				insertAfter("settle stop", entry{label: "settle late", settles: []string{"running"}})},
		{name: "a task's STOPPED settled before its container's", rule: model.RuleTaskStoppedFirst, at: "settle stop",
			life: cleanLife().replace("settle stop", entry{label: "settle stop", settles: []string{"task stopped"}}).
				insertAfter("settle stop", entry{label: "settle late", settles: []string{"stopped"}})},
		{name: "a task STOPPED while its container runs", rule: model.RuleStoppedWhileRunning, at: "task stopped",
			life: cleanLife().moveAfter("stopped", "task stopped")},
		{name: "a container STOPPED while its start is in flight", rule: model.RuleStoppedWhileRunning, at: "stopped",
			life: cleanLife().replace("running", entry{label: "running", ev: &event.AgentStopped{}}).
				replace("task running", entry{label: "task running", ev: &event.AgentStopped{}}).
				replace("settle run", entry{label: "settle run", ev: &event.AgentStopped{}}).
				replace("stopped", entry{label: "stopped", task: a, container: app, ev: ct(event.StatusCreated, event.StatusStopped)}).
				replace("task stopped", entry{label: "task stopped", task: a, ev: tt(event.StatusNone, event.StatusStopped)})},
		{name: "a payload applied twice", rule: model.RulePayloadTwice, at: "payload again",
			life: cleanLife().insertAfter("added", entry{label: "payload again", ev: &event.PayloadReceived{MessageID: "m1"}})},
		{name: "a cleaned task run again", rule: model.RuleTaskTwice, at: "added again",
			life: cleanLife().insertAfter("cleaned", entry{label: "added again", task: a, ev: &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: app, Image: "web:1"}}}})},
		{name: "a status that goes back", rule: model.RuleStatusOrder, at: "back",
			life: cleanLife().insertAfter("running", entry{label: "back", task: a, container: app, ev: ct(event.StatusRunning, event.StatusCreated)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := model.CheckJournal(tc.life.write(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) == 0 {
				t.Fatalf("the model accepted the journal (%d records)", rep.Records)
			}
			got, want := rep.Violations[0], uint64(tc.life.index(tc.at)+1)
			if got.Rule != tc.rule || got.Seq != want {
				t.Fatalf("first violation %v; want %q at record %d\nall: %v", got, tc.rule, want, rep.Err())
			}
			t.Log(got)
		})
	}
}

func TestTheModelAcceptsACleanLife(t *testing.T) {
	rep, err := model.CheckJournal(cleanLife().write(t))
	if err != nil || rep.Err() != nil {
		t.Fatalf("%v %v", err, rep.Err())
	}
	if rep.Records != len(cleanLife()) || rep.Tasks != 1 {
		t.Fatalf("read %d records and %d tasks; want %d and 1", rep.Records, rep.Tasks, len(cleanLife()))
	}
}

// fencedLife: a start asked, found never started (ended), the container fenced — removed
// before it ran, so the start cannot land — then STOPPED, settled, cleaned with nothing left
// to remove.
func fencedLife() life {
	const a, app = "task/a", "app"
	l := cleanLife()[:6] // up to the start asked
	return append(slices.Clone(l),
		entry{label: "ended", task: a, container: app, ev: &event.CallEnded{Call: "start", Reason: "the runtime shows it never started"}},
		entry{label: "fence", task: a, container: app, ev: &event.ContainerRemoved{RuntimeID: "r1", Fence: true}},
		entry{label: "stopped", task: a, container: app, ev: ct(event.StatusCreated, event.StatusStopped)},
		entry{label: "task stopped", task: a, ev: tt(event.StatusNone, event.StatusStopped)},
		entry{label: "settle stop", settles: []string{"stopped", "task stopped"}},
		entry{label: "acked", task: a, acks: "task stopped"},
		entry{label: "cleanup", task: a, ev: &event.CleanupStarted{}},
		entry{label: "cleaned", task: a, ev: &event.TaskCleaned{}},
	)
}

// The model accepts a fence only of a container that never ran, a start of it asked and none
// in flight, and nothing of it runs after.
func TestTheModelAcceptsAFence(t *testing.T) {
	rep, err := model.CheckJournal(fencedLife().write(t))
	if err != nil || rep.Err() != nil {
		t.Fatalf("a fenced life: %v %v", err, rep.Err())
	}
	t.Setenv(model.TallyEnv, "") // planted journals, rejected on purpose
	const a, app = "task/a", "app"
	for _, tc := range []struct {
		name string
		life life
		rule model.Rule
		at   string
	}{
		{"a fence while the start is in flight", fencedLife().moveAfter("ended", "fence"), model.RuleStoppedWhileRunning, "fence"},
		{"a fence of a container never asked to start", fencedLife().replace("start", entry{label: "start", ev: &event.AgentStopped{}}).
			replace("ended", entry{label: "ended", ev: &event.AgentStopped{}}), model.RuleCleanupBeforeSettled, "fence"},
		{"a fence of a container that ran", fencedLife().replace("ended", entry{label: "ended", task: a, container: app, ev: ct(event.StatusCreated, event.StatusRunning)}),
			model.RuleCleanupBeforeSettled, "fence"},
		{"a start after the fence", fencedLife().insertAfter("fence", entry{label: "start again", task: a, container: app, ev: &event.CallStarted{Call: "start"}}),
			model.RuleStartAfterStopped, "start again"},
		{"RUNNING after the fence", fencedLife().insertAfter("fence", entry{label: "running", task: a, container: app, ev: ct(event.StatusCreated, event.StatusRunning)}),
			model.RuleStartAfterStopped, "running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := model.CheckJournal(tc.life.write(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) == 0 {
				t.Fatalf("the model accepted the journal (%d records)", rep.Records)
			}
			got, want := rep.Violations[0], uint64(tc.life.index(tc.at)+1)
			if got.Rule != tc.rule || got.Seq != want {
				t.Fatalf("first violation %v; want %q at record %d\nall: %v", got, tc.rule, want, rep.Err())
			}
		})
	}
}

// madeAgainLife: two starts asked, each found never started (ended), the container fenced to
// be made again — its task runs on — then created again as a new container, started, run to
// its exit, STOPPED, settled and cleaned.
func madeAgainLife() life {
	const a, app = "task/a", "app"
	l := cleanLife()[:6] // up to the start asked
	return append(slices.Clone(l),
		entry{label: "ended", task: a, container: app, ev: &event.CallEnded{Call: "start", Reason: "the runtime shows it never started"}},
		entry{label: "start 2", task: a, container: app, ev: &event.CallStarted{Call: "start"}},
		entry{label: "ended 2", task: a, container: app, ev: &event.CallEnded{Call: "start", Reason: "the runtime shows it never started"}},
		entry{label: "fence", task: a, container: app, ev: &event.ContainerRemoved{RuntimeID: "r1", Fence: true, Again: true}},
		entry{label: "created again", task: a, container: app, ev: &event.ContainerTransitioned{From: event.StatusCreated, To: event.StatusCreated, RuntimeID: "r2"}},
		entry{label: "start 3", task: a, container: app, ev: &event.CallStarted{Call: "start"}},
		entry{label: "running", task: a, container: app, ev: ct(event.StatusCreated, event.StatusRunning)},
		entry{label: "task running", task: a, ev: tt(event.StatusNone, event.StatusRunning)},
		entry{label: "stopped", task: a, container: app, ev: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: new(int)}},
		entry{label: "task stopped", task: a, ev: tt(event.StatusRunning, event.StatusStopped)},
		entry{label: "settle stop", settles: []string{"stopped", "task stopped"}},
		entry{label: "acked", task: a, acks: "task stopped"},
		entry{label: "cleanup", task: a, ev: &event.CleanupStarted{}},
		entry{label: "removed", task: a, container: app, ev: &event.ContainerRemoved{RuntimeID: "r2"}},
		entry{label: "cleaned", task: a, ev: &event.TaskCleaned{}},
	)
}

// The model accepts a container made again only right after a fence that says so, of a task
// not on its way down, once a fence; the new container runs once.
func TestTheModelAcceptsAContainerMadeAgainOnlyAfterItsFence(t *testing.T) {
	rep, err := model.CheckJournal(madeAgainLife().write(t))
	if err != nil || rep.Err() != nil {
		t.Fatalf("a life made again after its fence: %v %v", err, rep.Err())
	}
	t.Setenv(model.TallyEnv, "") // planted journals, rejected on purpose
	const a, app = "task/a", "app"
	stop := entry{label: "stop", task: a, ev: &event.DesiredChanged{To: event.StatusStopped}}
	for _, tc := range []struct {
		name string
		life life
		rule model.Rule
		at   string
	}{
		{"made again without a fence", madeAgainLife().replace("fence", entry{label: "fence", ev: &event.AgentStopped{}}), model.RuleStatusOrder, "created again"},
		{"made again after a fence that does not say so", madeAgainLife().replace("fence", entry{label: "fence", task: a, container: app,
			ev: &event.ContainerRemoved{RuntimeID: "r1", Fence: true}}), model.RuleStatusOrder, "created again"},
		{"fenced to be made again in a task the control plane stopped", madeAgainLife().insertAfter("ended 2", stop), model.RuleStatusOrder, "fence"},
		{"made again twice after one fence", madeAgainLife().insertAfter("created again", entry{label: "created twice", task: a, container: app,
			ev: &event.ContainerTransitioned{From: event.StatusCreated, To: event.StatusCreated, RuntimeID: "r3"}}), model.RuleStatusOrder, "created twice"},
		{"a start before it is made again", madeAgainLife().moveAfter("start 3", "fence"), model.RuleStatusOrder, "start 3"},
		{"the new container started twice", madeAgainLife().insertAfter("running", entry{label: "start 4", task: a, container: app, ev: &event.CallStarted{Call: "start"}}),
			model.RuleStartedTwice, "start 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := model.CheckJournal(tc.life.write(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) == 0 {
				t.Fatalf("the model accepted the journal (%d records)", rep.Records)
			}
			got, want := rep.Violations[0], uint64(tc.life.index(tc.at)+1)
			if got.Rule != tc.rule || got.Seq != want {
				t.Fatalf("first violation %v; want %q at record %d\nall: %v", got, tc.rule, want, rep.Err())
			}
		})
	}
}
