package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/testrig"
)

// The seed's race: a throttled STOPPED, a short cleanup wait, and the control plane sending
// the task again after a reconnect. The task is not cleaned before its STOPPED is settled and
// is never run a second time — neither while live nor once tombstoned.
func TestSeedRaceCannotCleanEarlyNorRunTwice(t *testing.T) {
	r := newRig(t, time.Second)
	r.assign("task/seed", "RUNNING", ctr("app", "sleep", "2s", "0"))
	if got := r.known("task/seed"); got != event.StatusRunning {
		t.Fatalf("task is %s; want RUNNING", got)
	}
	r.cp.Answer = testrig.Throttle
	r.advance(3 * time.Second)
	if got := r.known("task/seed"); got != event.StatusStopped {
		t.Fatalf("after its container exited the task is %s; want STOPPED", got)
	}
	// Throttled for ten minutes: the wait passes 600 times over.
	r.advance(10 * time.Minute)
	if got := r.known("task/seed"); got != event.StatusStopped || r.containers("task/seed") != 1 {
		t.Fatalf("throttled task is %s with %d containers; want STOPPED with its container kept", got, r.containers("task/seed"))
	}
	// The reconnect: the same task again, in a new payload.
	r.assign("task/seed", "RUNNING", ctr("app", "sleep", "2s", "0"))
	r.advance(time.Minute)
	if r.rt.Created() != 1 || len(r.records("task/seed", event.TypeTaskAdded)) != 1 {
		t.Fatalf("re-sent task ran again: %d containers created, %d task_added", r.rt.Created(), len(r.records("task/seed", event.TypeTaskAdded)))
	}
	if got := r.known("task/seed"); got != event.StatusStopped {
		t.Fatalf("after the re-send the task is %s; want STOPPED", got)
	}
	// Throttling ends: settled, acknowledged, cleaned at once (the wait has long passed).
	r.cp.Answer = testrig.SettleAll
	r.advance(time.Minute) // the submitter's backoff grew while throttled (at most 30 s ± 50%)
	if got := r.known("task/seed"); got != event.StatusCleaned || r.containers("task/seed") != 0 {
		t.Fatalf("after the ack the task is %s with %d containers; want CLEANED with none", got, r.containers("task/seed"))
	}
	first := map[string]bool{}
	for _, c := range r.cp.Sent() {
		if c.TaskARN == "task/seed" && c.Status == "STOPPED" {
			first[c.ID] = true
		}
	}
	// Once tombstoned, a re-send is not run; its final STOPPED goes out again under the same ids.
	sentBefore := len(r.cp.Sent())
	r.assign("task/seed", "RUNNING", ctr("app", "sleep", "2s", "0"))
	r.advance(time.Minute) // ten minutes of 429s taught the submitter a pace of up to 30 s
	if r.rt.Created() != 1 {
		t.Fatalf("tombstoned task ran again: %d containers created", r.rt.Created())
	}
	again := r.cp.Sent()[sentBefore:]
	if len(again) == 0 {
		t.Fatal("the final STOPPED was not reported again for a re-sent tombstoned task")
	}
	for _, c := range again {
		if !first[c.ID] || c.Status != "STOPPED" {
			t.Fatalf("re-report %+v is not one of the first STOPPED changes %v", c, first)
		}
	}
}

// An ack that arrives after the wait has passed starts the cleanup at once: within the
// jitter, not on a poll.
func TestAckAfterTheWaitCleansAtOnce(t *testing.T) {
	r := newRig(t, 5*time.Second)
	r.cp.Answer = testrig.Throttle
	r.assign("task/late", "RUNNING", ctr("app", "exit", "3"))
	r.advance(30 * time.Second)
	if got := r.known("task/late"); got != event.StatusStopped {
		t.Fatalf("task is %s; want STOPPED, unacknowledged", got)
	}
	r.cp.Answer = testrig.SettleAll
	r.advance(time.Minute)
	acked := r.records("task/late", event.TypeStoppedAcked)
	cleaned := r.records("task/late", event.TypeTaskCleaned)
	if len(acked) != 1 || len(cleaned) != 1 {
		t.Fatalf("%d stopped_acked, %d task_cleaned; want one each", len(acked), len(cleaned))
	}
	if d := cleaned[0].Time.Sub(acked[0].Time); d > 100*time.Millisecond {
		t.Fatalf("cleanup finished %v after the ack; want ≤ 100 ms", d)
	}
	started := r.records("task/late", event.TypeCleanupStarted)[0]
	var stopped time.Time
	for _, rec := range r.records("task/late", event.TypeTaskTransitioned) {
		if rec.Event.(*event.TaskTransitioned).To == event.StatusStopped {
			stopped = rec.Time
		}
	}
	if started.Time.Before(stopped.Add(5 * time.Second)) {
		t.Fatal("cleanup started before the wait from the journaled stop time")
	}
}

// An ack before the wait: the cleanup waits for stop time + wait, and not a moment longer
// than the jitter.
func TestAckBeforeTheWaitCleansAtTheDeadline(t *testing.T) {
	r := newRig(t, time.Minute)
	r.assign("task/early", "RUNNING", ctr("app", "exit", "0"))
	r.advance(59 * time.Second)
	if got := r.known("task/early"); got != event.StatusStoppedAcked {
		t.Fatalf("task is %s; want STOPPED_ACKED, waiting", got)
	}
	r.advance(2 * time.Second)
	if got := r.known("task/early"); got != event.StatusCleaned {
		t.Fatalf("task is %s after the deadline; want CLEANED", got)
	}
}

// Desired STOPPED stops every container (143); an essential container's exit stops the others.
func TestStopSemantics(t *testing.T) {
	r := newRig(t, time.Hour)
	r.assign("task/two", "RUNNING", ctr("app", "sleep", "5s", "7"), ctr("side"))
	r.assign("task/stopme", "RUNNING", ctr("app"), ctr("side"))
	r.advance(6 * time.Second)
	two := r.task("task/two")
	if two.Known.Rank() < event.StatusStopped.Rank() || *two.Container("app").ExitCode != 7 || *two.Container("side").ExitCode != 143 {
		t.Fatalf("essential exit: %s app=%v side=%v", two.Known, two.Container("app").ExitCode, two.Container("side").ExitCode)
	}
	if r.known("task/stopme") != event.StatusRunning {
		t.Fatalf("unrelated task is %s", r.known("task/stopme"))
	}
	r.assign("task/stopme", "STOPPED", ctr("app"), ctr("side"))
	r.advance(time.Second)
	s := r.task("task/stopme")
	if s.Known != event.StatusStoppedAcked || *s.Container("app").ExitCode != 143 || *s.Container("side").ExitCode != 143 {
		t.Fatalf("desired STOPPED: task %s", s.Known)
	}
	if s.Reason != "stopped by the control plane" {
		t.Fatalf("reason %q", s.Reason)
	}
}

// Pull, create and start failures stop the task with a reason naming the step.
func TestFailuresStopTheTaskWithAReason(t *testing.T) {
	r := newRig(t, time.Hour)
	for _, step := range []string{"pull", "create", "start"} {
		arn := "task/" + step
		r.assign(arn, "RUNNING", protocol.Container{Name: "app", Image: "fail-" + step})
		r.advance(time.Second)
		c := r.task(arn).Container("app")
		if r.known(arn) != event.StatusStoppedAcked || c.Reason == "" || c.Reason[:len(step)] != step {
			t.Fatalf("%s failure: task %s, container reason %q", step, r.known(arn), c.Reason)
		}
	}
}

// A crash at any phase of a task's life resumes exactly: nothing is created twice, every
// change is reported, the cleanup happens once, from the journaled stop time.
func TestRestartInEveryPhaseResumes(t *testing.T) {
	phases := []struct {
		name string
		at   func(r *rig)
	}{
		{"assigned, not yet run", func(r *rig) {}},
		{"running, reports throttled", func(r *rig) { r.cp.Answer = testrig.Throttle; r.advance(time.Second) }},
		{"stopped, unacknowledged", func(r *rig) { r.cp.Answer = testrig.Throttle; r.advance(15 * time.Second) }},
		{"acknowledged, waiting out the cleanup", func(r *rig) { r.advance(15 * time.Second) }},
		{"exited while the agent was down", func(r *rig) {}},
	}
	for i, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			r := newRig(t, 20*time.Second)
			r.assign("task/x", "RUNNING", ctr("app", "sleep", "10s", "4"))
			if i == 0 {
				// Crash between journaling the payload and running anything: step nothing.
				r.exec.Drop()
			}
			ph.at(r)
			before := r.known("task/x")
			if i == 4 {
				r.advance(2 * time.Second) // running
				r.j.Close()
				r.clock.Set(r.clock.Now().Add(30 * time.Second)) // down while it exits
				r.start()
			} else {
				r.crash()
			}
			if got := r.known("task/x"); got.Rank() < before.Rank() {
				t.Fatalf("after the restart the task is %s; it was %s", got, before)
			}
			r.cp.Answer = testrig.SettleAll
			r.advance(time.Minute)
			if got := r.known("task/x"); got != event.StatusCleaned {
				t.Fatalf("task ended %s; want CLEANED", got)
			}
			if r.rt.Created() != 1 {
				t.Fatalf("%d containers created; want 1", r.rt.Created())
			}
			var exit *int
			for _, rec := range r.records("task/x", event.TypeContainerTransitioned) {
				if ev := rec.Event.(*event.ContainerTransitioned); ev.To == event.StatusStopped {
					exit = ev.ExitCode
				}
			}
			if exit == nil || *exit != 4 {
				t.Fatalf("exit code %v journaled; want 4", exit)
			}
			for id, n := range r.cp.Accepted() {
				if n > 1 && i != 2 {
					t.Fatalf("change %s accepted %d times", id, n)
				}
			}
			if len(r.records("task/x", event.TypeCleanupStarted)) != 1 {
				t.Fatal("cleanup started more than once")
			}
		})
	}
}

// A full disk: the agent stops acknowledging new payloads, keeps its running tasks, says it is
// unhealthy, and recovers when space returns; nothing it had acknowledged is lost.
func TestDiskFullStopsAcknowledgingAndRecovers(t *testing.T) {
	r := newRig(t, time.Hour)
	r.assign("task/before", "RUNNING", ctr("app"))
	r.assign("task/stops", "RUNNING", ctr("app", "sleep", "10s", "2"))
	r.diskFull.Store(true)
	if _, err := r.deliver("task/during", "RUNNING", ctr("app")); err == nil {
		t.Fatal("a payload was journaled (and would be acknowledged) on a full disk")
	}
	if r.e.Unhealthy() == "" {
		t.Fatal("healthy on a full disk")
	}
	r.advance(time.Minute)
	if r.known("task/before") != event.StatusRunning || r.task("task/during") != nil {
		t.Fatalf("on a full disk: before=%s, during=%v", r.known("task/before"), r.task("task/during"))
	}
	// The exit that happened on the full disk is not lost: it is journaled once space returns,
	// by the engine's own retry, without any new input.
	r.diskFull.Store(false)
	r.advance(2 * time.Second)
	if got := r.known("task/stops"); got.Rank() < event.StatusStopped.Rank() {
		t.Fatalf("the exit during the full disk was lost: task is %s", got)
	}
	if _, err := r.deliver("task/during", "RUNNING", ctr("app")); err != nil {
		t.Fatalf("after space returned: %v", err)
	}
	if r.e.Unhealthy() != "" {
		t.Fatalf("still unhealthy after space returned: %s", r.e.Unhealthy())
	}
	r.advance(time.Second)
	if r.known("task/during") != event.StatusRunning || r.known("task/before") != event.StatusRunning {
		t.Fatal("tasks not running after recovery")
	}
	r.crash()
	if r.known("task/before") != event.StatusRunning || r.known("task/during") != event.StatusRunning {
		t.Fatal("lost acknowledged work across a restart")
	}
}

// Compaction: after the retention, a cleaned task's history and tombstone go; the journal
// still verifies, a restart recovers, and live tasks keep their whole history.
func TestCompactionDropsOnlyLongCleanedHistory(t *testing.T) {
	r := newRig(t, 0)
	r.cfg.Retention, r.cfg.SnapshotEvery = time.Minute, 10
	r.crash() // take the new config
	r.assign("task/old", "RUNNING", ctr("app", "exit", "0"))
	r.assign("task/live", "RUNNING", ctr("app"))
	r.advance(time.Second)
	if r.known("task/old") != event.StatusCleaned {
		t.Fatalf("task/old is %s", r.known("task/old"))
	}
	r.advance(2 * time.Minute)
	for i := 0; i < 3; i++ { // enough new records for a snapshot, which triggers compaction
		r.assign(fmt.Sprintf("task/new-%d", i), "RUNNING", ctr("app", "exit", "0"))
		r.advance(time.Second)
	}
	if _, tomb := r.e.State().Tombstones["task/old"]; tomb {
		t.Fatal("task/old's tombstone outlived the retention")
	}
	if n := len(r.records("task/old", event.TypeTaskAdded)); n != 0 {
		t.Fatal("task/old's history outlived the retention")
	}
	if len(r.records("task/live", event.TypeTaskAdded)) != 1 || r.known("task/live") != event.StatusRunning {
		t.Fatal("a live task lost its history")
	}
	res, err := r.j.Verify(nil)
	if err != nil || len(res.Problems) > 0 || res.Holes == 0 {
		t.Fatalf("verify after compaction: %v %v (holes %d)", res.Problems, err, res.Holes)
	}
	r.crash()
	if r.known("task/live") != event.StatusRunning || r.known("task/new-0") != event.StatusCleaned {
		t.Fatal("restart after compaction lost state")
	}
}

// Tombstones stay until their retention ends, whatever the budget: a journal kept over
// --journal-max-bytes by the snapshots that hold them, once every cleaned task's history is
// gone, is named in health as that (issue 25), not left unnamed nor blamed on the live tasks.
func TestTombstonesOverTheBudgetAreNamedInHealth(t *testing.T) {
	r := newRigIn(t, fastDir(t), 0) // 400 tasks' commits: bytes counted, durability not in question
	r.cfg.Retention, r.cfg.SnapshotEvery, r.cfg.JournalMaxBytes = time.Hour, 10, 48<<10
	r.crash() // take the new config
	r.assign("task/live", "RUNNING", ctr("app"))
	const tasks = 400
	for i := 0; i < tasks; i++ {
		r.assign(fmt.Sprintf("task/done-%04d", i), "RUNNING", ctr("app", "exit", "0"))
		r.advance(time.Second)
	}
	st := r.e.State()
	for arn, ts := range st.Tombstones {
		if !ts.HistoryDropped() && arn < "task/done-0200" {
			t.Fatalf("%s kept its history past the budget: the journal never went over it", arn)
		}
	}
	problem := healthOf(r.e, engine.HealthJournalBudget)
	if !strings.Contains(problem, "the tombstones need more") || !strings.Contains(problem, "--journal-max-bytes 49152") {
		t.Fatalf("health journal_budget says %q; want the tombstones named as what keeps the journal over its budget", problem)
	}
	if n := len(r.records("task/done-0000", event.TypeTaskAdded)); n != 0 || st.Tombstones["task/done-0000"] == nil {
		t.Fatal("the first task's history is still there, or its tombstone is gone")
	}
}

// healthOf is the problem health shows for src ("" while it works).
func healthOf(e *engine.Engine, src engine.HealthSource) string {
	for _, s := range e.Health() {
		if s.Source == src {
			return s.Problem
		}
	}
	return ""
}

// Past --journal-max-bytes, compaction drops a cleaned task's history before its retention
// ends and keeps its tombstone: a re-send of it is recognised, not run. A budget too small
// even for the live task's history is named in health (journal_budget), not silently missed.
func TestJournalBudgetDropsCleanedHistoryEarlyKeepingTombstones(t *testing.T) {
	r := newRig(t, 0)
	r.cfg.Retention, r.cfg.SnapshotEvery, r.cfg.JournalMaxBytes = time.Hour, 10, 1
	r.crash() // take the new config
	r.assign("task/old", "RUNNING", ctr("app", "exit", "0"))
	r.assign("task/live", "RUNNING", ctr("app"))
	r.advance(time.Second)
	for i := 0; i < 3; i++ { // enough new records for a snapshot, which triggers compaction
		r.assign(fmt.Sprintf("task/new-%d", i), "RUNNING", ctr("app", "exit", "0"))
		r.advance(time.Second)
	}
	ts := r.e.State().Tombstones["task/old"]
	if ts == nil || !ts.HistoryDropped() {
		t.Fatalf("task/old's tombstone is %+v; want it kept, its history dropped early", ts)
	}
	if n := len(r.records("task/old", event.TypeTaskAdded)); n != 0 {
		t.Fatal("task/old's history is still in the journal past the budget")
	}
	if len(r.records("task/live", event.TypeTaskAdded)) != 1 {
		t.Fatal("a live task lost its history to the budget")
	}
	var problem string
	for _, s := range r.e.Health() {
		if s.Source == engine.HealthJournalBudget {
			problem = s.Problem
		}
	}
	if !strings.Contains(problem, "--journal-max-bytes 1;") || !strings.Contains(problem, "the live tasks need more") {
		t.Fatalf("health journal_budget says %q; want the budget too small for the live tasks named", problem)
	}
	res, err := r.j.Verify(nil)
	if err != nil || len(res.Problems) > 0 {
		t.Fatalf("verify after early drops: %v %v", res.Problems, err)
	}
	r.crash()
	r.assign("task/old", "RUNNING", ctr("app", "exit", "0")) // re-sent after a restart
	r.advance(time.Second)
	if r.known("task/old") != event.StatusCleaned || r.containers("task/old") != 0 {
		t.Fatalf("re-sent task/old, its history dropped early, is %s with %d containers: run again", r.known("task/old"), r.containers("task/old"))
	}
}
