package fsm_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// v1Snapshot is a version-1 snapshot (before issue 25), made by that build: two tasks of two
// containers, exited 1 and 3, cleaned — one before the journal had an id (its change ids are
// "c-<seq>"), one after. v1Finals are the final changes that build reported for them.
const v1Snapshot = `{"version":1,"state":{"agent_id":"agent-1","journal_id":"01JOLD","last_seq":41,"last_time":"2026-03-01T12:01:01.5Z","starts":1,"tasks":{},"tombstones":{"task/after-start":{"arn":"task/after-start","family":"web","reason":"essential container app exited with code 1","stopped_at":"2026-03-01T12:00:52.5Z","cleaned_at":"2026-03-01T12:01:01.5Z","clean_seq":41,"final":[{"id":"c-01JOLD-33","seq":33,"task_arn":"task/after-start","container":"app","status":"STOPPED","exit_code":1,"at":"2026-03-01T12:00:49.5Z"},{"id":"c-01JOLD-34","seq":34,"task_arn":"task/after-start","container":"side","status":"STOPPED","exit_code":3,"reason":"stopped by agentd: essential container app exited","at":"2026-03-01T12:00:51Z"},{"id":"c-01JOLD-35","seq":35,"task_arn":"task/after-start","status":"STOPPED","reason":"essential container app exited with code 1","at":"2026-03-01T12:00:52.5Z"}],"exits":{"app":1,"side":3}},"task/before-start":{"arn":"task/before-start","family":"web","reason":"essential container app exited with code 1","stopped_at":"2026-03-01T12:00:21Z","cleaned_at":"2026-03-01T12:00:30Z","clean_seq":20,"final":[{"id":"c-12","seq":12,"task_arn":"task/before-start","container":"app","status":"STOPPED","exit_code":1,"at":"2026-03-01T12:00:18Z"},{"id":"c-13","seq":13,"task_arn":"task/before-start","container":"side","status":"STOPPED","exit_code":3,"reason":"stopped by agentd: essential container app exited","at":"2026-03-01T12:00:19.5Z"},{"id":"c-14","seq":14,"task_arn":"task/before-start","status":"STOPPED","reason":"essential container app exited with code 1","at":"2026-03-01T12:00:21Z"}],"exits":{"app":1,"side":3}}},"messages":{"m-task/after-start":22,"m-task/before-start":1},"outbox":{}}}`

const v1Finals = `[{"id": "c-12", "seq": 12, "task_arn": "task/before-start", "container": "app", "status": "STOPPED", "exit_code": 1, "at": "2026-03-01T12:00:18Z"}, {"id": "c-13", "seq": 13, "task_arn": "task/before-start", "container": "side", "status": "STOPPED", "exit_code": 3, "reason": "stopped by agentd: essential container app exited", "at": "2026-03-01T12:00:19.5Z"}, {"id": "c-14", "seq": 14, "task_arn": "task/before-start", "status": "STOPPED", "reason": "essential container app exited with code 1", "at": "2026-03-01T12:00:21Z"}, {"id": "c-01JOLD-33", "seq": 33, "task_arn": "task/after-start", "container": "app", "status": "STOPPED", "exit_code": 1, "at": "2026-03-01T12:00:49.5Z"}, {"id": "c-01JOLD-34", "seq": 34, "task_arn": "task/after-start", "container": "side", "status": "STOPPED", "exit_code": 3, "reason": "stopped by agentd: essential container app exited", "at": "2026-03-01T12:00:51Z"}, {"id": "c-01JOLD-35", "seq": 35, "task_arn": "task/after-start", "status": "STOPPED", "reason": "essential container app exited with code 1", "at": "2026-03-01T12:00:52.5Z"}]`

// resend re-sends every tombstoned task of st and returns what the agent then reports.
func resend(t *testing.T, st *fsm.State, arns ...string) []fsm.Change {
	t.Helper()
	for _, arn := range arns {
		if err := st.Apply(event.Record{Seq: st.LastSeq + 1, Time: st.LastTime.Add(time.Second), Task: arn, Event: &event.TaskResent{MessageID: "m-again"}}); err != nil {
			t.Fatal(err)
		}
	}
	return st.Pending(100)
}

func wantChanges(t *testing.T, got []fsm.Change, want string) {
	t.Helper()
	var w []fsm.Change
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	g, _ := json.Marshal(got)
	if !reflect.DeepEqual(got, w) {
		t.Fatalf("re-sent tombstones reported\n%s\nwant (as first reported)\n%s", g, want)
	}
}

// An upgraded agent restores its version-1 snapshot, and a task it tombstoned then, re-sent,
// is reported STOPPED again exactly as it was the first time: same ids (bare ones too), exit
// codes, reasons and times. The same holds after the upgraded agent snapshots it again.
func TestVersion1TombstonesReportTheirFinalChangesAgain(t *testing.T) {
	arns := []string{"task/before-start", "task/after-start"}
	st, err := fsm.Restore([]byte(v1Snapshot))
	if err != nil {
		t.Fatalf("a version-1 snapshot is refused: %v", err)
	}
	again, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	wantChanges(t, resend(t, st, arns...), v1Finals)
	if len(again) >= len(v1Snapshot) {
		t.Errorf("the version-2 snapshot is %d bytes, the version-1 one %d: tombstones not compact", len(again), len(v1Snapshot))
	}
	st2, err := fsm.Restore(again)
	if err != nil {
		t.Fatalf("restore of the re-encoded snapshot: %v", err)
	}
	wantChanges(t, resend(t, st2, arns...), v1Finals)
}

// A tombstone made by this build, live and restored, gives back what was reported.
func TestReSentTombstoneReportsWhatWasReported(t *testing.T) {
	st := fsm.New()
	one, three := 1, 3
	recs := []event.Record{rec("", "", &event.AgentStarted{AgentID: "a", JournalID: "01JNEW"})}
	recs = append(recs, rec("", "", &event.PayloadReceived{MessageID: "m-1"}),
		rec("t1", "", &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "app", Image: "x", Essential: true}, {Name: "side", Image: "y"}}}))
	for _, step := range [][2]event.Status{{"NONE", "PULLED"}, {"PULLED", "CREATED"}, {"CREATED", "RUNNING"}} {
		recs = append(recs, rec("t1", "app", ctr(step[0], step[1])), rec("t1", "side", ctr(step[0], step[1])), rec("t1", "", tsk(step[0], step[1])))
	}
	recs = append(recs, rec("t1", "app", &event.ContainerTransitioned{From: "RUNNING", To: "STOPPED", ExitCode: &one}),
		rec("t1", "side", &event.ContainerTransitioned{From: "RUNNING", To: "STOPPED", ExitCode: &three, Reason: "stopped by agentd"}),
		rec("t1", "", &event.TaskTransitioned{From: "RUNNING", To: "STOPPED", Reason: "essential container app exited"}))
	for _, r := range stream(recs...) {
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	reported := st.Pending(100)
	var ids []string
	for _, c := range reported {
		ids = append(ids, c.ID)
	}
	if len(ids) != 3 {
		t.Fatalf("reported %v, want 3 STOPPED changes", ids)
	}
	rest := []event.Record{rec("t1", "", &event.ChangesSettled{Accepted: ids}), rec("t1", "", &event.StoppedAcked{ChangeID: ids[2]}),
		rec("t1", "", &event.CleanupStarted{}), rec("t1", "app", &event.ContainerRemoved{}), rec("t1", "side", &event.ContainerRemoved{}), rec("t1", "", &event.TaskCleaned{})}
	for i, r := range rest {
		r.Seq, r.Time = st.LastSeq+1, st.LastTime.Add(time.Duration(i+1)*time.Second)
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := json.Marshal(reported)
	snap, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	wantChanges(t, resend(t, st, "t1"), string(want))
	restored, err := fsm.Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	wantChanges(t, resend(t, restored, "t1"), string(want))
}

// What a tombstone holds stays small: a field added to it is paid for by every task cleaned
// within the retention (the bench's heap per remembered task judges the whole; this catches
// the struct growing a size class, or its packed part growing for the commonest task: one
// container, exited, cleaned at once, within the 32-byte size class).
func TestTombstoneStaysSmall(t *testing.T) {
	if n := unsafe.Sizeof(fsm.Tombstone{}); n > 32 {
		t.Errorf("a tombstone is %d bytes, more than 32", n)
	}
	st := remembered(t, 1)
	for arn, ts := range st.Tombstones {
		if n := fsm.PackedSize(ts); n > 32 {
			t.Errorf("tombstone %s packs into %d bytes, more than 32", arn, n)
		}
	}
}

// remembered is a projection that ran n one-container tasks through their whole life, each
// in a payload of its own — the real mix: added, run, exited 0, reported, acknowledged,
// cleaned.
func remembered(t *testing.T, n int) *fsm.State {
	t.Helper()
	st := fsm.New()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(r event.Record) {
		now = now.Add(7 * time.Millisecond)
		r.Seq, r.Time = st.LastSeq+1, now
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	step(rec("", "", &event.AgentStarted{AgentID: "a", JournalID: "01JREMEMBERED"}))
	code := 0
	for i := range n {
		arn, msg := fmt.Sprintf("arn:aws:ecs:eu-west-1:123456789012:task/rem/%08d", i), fmt.Sprintf("m-%06d", i)
		step(rec("", "", &event.PayloadReceived{MessageID: msg}))
		step(rec(arn, "", &event.TaskAdded{MessageID: msg, Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "app", Image: "x", Essential: true}}}))
		for _, s := range [][2]event.Status{{"NONE", "PULLED"}, {"PULLED", "CREATED"}, {"CREATED", "RUNNING"}} {
			step(rec(arn, "app", ctr(s[0], s[1])))
			step(rec(arn, "", tsk(s[0], s[1])))
		}
		step(rec(arn, "app", &event.ContainerTransitioned{From: "RUNNING", To: "STOPPED", ExitCode: &code}))
		step(rec(arn, "", &event.TaskTransitioned{From: "RUNNING", To: "STOPPED", Reason: "essential container app exited with code 0"}))
		var ids []string
		for _, c := range st.Pending(10) {
			ids = append(ids, c.ID)
		}
		step(rec(arn, "", &event.ChangesSettled{Accepted: ids}))
		step(rec(arn, "", &event.StoppedAcked{ChangeID: ids[len(ids)-1]}))
		step(rec(arn, "", &event.CleanupStarted{}))
		step(rec(arn, "app", &event.ContainerRemoved{}))
		step(rec(arn, "", &event.TaskCleaned{}))
	}
	if len(st.Tombstones) != n {
		t.Fatalf("%d tombstones after %d tasks", len(st.Tombstones), n)
	}
	return st
}

// What a remembered task holds in the projection, a payload a task — its ARN, its tombstone,
// its place in the table, its payload's id — stays under 220 bytes of heap (171–180 measured;
// 330 before issue 41: the tombstone's two structs, 144 bytes, and a table entry for the id).
func TestARememberedTaskHoldsLittleHeap(t *testing.T) {
	const n = 20000
	before := liveHeap()
	st := remembered(t, n)
	per := float64(int64(liveHeap())-int64(before)) / n
	runtime.KeepAlive(st)
	t.Logf("%.0f bytes of heap a remembered task", per)
	if per > 220 {
		t.Errorf("a remembered task holds %.0f bytes of heap, more than 220", per)
	}
}

// liveHeap is the heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
