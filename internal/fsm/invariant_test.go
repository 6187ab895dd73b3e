package fsm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// stream numbers records and stamps them one second apart.
func stream(recs ...event.Record) []event.Record {
	for i := range recs {
		recs[i].Seq = uint64(i + 1)
		recs[i].Time = t0.Add(time.Duration(i) * time.Second)
	}
	return recs
}

func rec(task, container string, e event.Event) event.Record {
	return event.Record{Task: task, Container: container, Event: e}
}

func ctr(from, to event.Status) *event.ContainerTransitioned {
	return &event.ContainerTransitioned{From: from, To: to}
}

func tsk(from, to event.Status) *event.TaskTransitioned {
	return &event.TaskTransitioned{From: from, To: to}
}

// upToRunning is a valid start: one task with one container, running.
func upToRunning() []event.Record {
	return []event.Record{
		rec("", "", &event.PayloadReceived{MessageID: "m-1"}),
		rec("t1", "", &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "app", Image: "x", Essential: true}}}),
		rec("t1", "app", ctr("NONE", "PULLED")), rec("t1", "", tsk("NONE", "PULLED")),
		rec("t1", "app", ctr("PULLED", "CREATED")), rec("t1", "", tsk("PULLED", "CREATED")),
		rec("t1", "app", ctr("CREATED", "RUNNING")), rec("t1", "", tsk("CREATED", "RUNNING")),
	}
}

func TestCheckerNamesEachPlantedDefect(t *testing.T) {
	stop := []event.Record{rec("t1", "app", ctr("RUNNING", "STOPPED")), rec("t1", "", tsk("RUNNING", "STOPPED"))}
	cases := []struct {
		name  string
		tail  []event.Record
		rule  fsm.Rule
		atSeq uint64
	}{
		{"cleanup without stopped-acked", append(stop, rec("t1", "", &event.CleanupStarted{})), fsm.RuleCleanupBeforeAck, 11},
		{"stopped-acked before the STOPPED was settled", append(stop, rec("t1", "", &event.StoppedAcked{})), fsm.RuleCleanupBeforeAck, 11},
		{"container started twice", []event.Record{rec("t1", "app", ctr("RUNNING", "RUNNING"))}, fsm.RuleStatusOrder, 9},
		{"status goes back", []event.Record{rec("t1", "app", ctr("RUNNING", "PULLED"))}, fsm.RuleStatusOrder, 9},
		{"task added twice", []event.Record{rec("t1", "", &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "a"}}})}, fsm.RuleRunTwice, 9},
		{"payload applied twice", []event.Record{rec("", "", &event.PayloadReceived{MessageID: "m-1"})}, fsm.RulePayloadTwice, 9},
		{"sent ahead of known", []event.Record{rec("", "", &event.ChangesSettled{Accepted: []string{"c-40"}})}, fsm.RuleSentAhead, 9},
		{"task stopped before its container", []event.Record{rec("t1", "", tsk("RUNNING", "STOPPED"))}, fsm.RuleStoppedOrder, 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fsm.NewChecker(nil)
			for _, r := range stream(append(upToRunning(), tc.tail...)...) {
				c.Record(r)
			}
			if len(c.Violations) != 1 {
				t.Fatalf("want exactly one violation, got %v", c.Violations)
			}
			v := c.Violations[0]
			if v.Rule != tc.rule || v.Seq != tc.atSeq {
				t.Fatalf("got %s; want rule %s at record %d", v, tc.rule, tc.atSeq)
			}
		})
	}
}

func TestCheckerReadsOnPastAViolation(t *testing.T) {
	recs := stream(append(upToRunning(),
		rec("t1", "app", ctr("RUNNING", "CREATED")), // 9: refused
		rec("t1", "app", ctr("RUNNING", "STOPPED")), // 10: fine
		rec("t1", "", &event.CleanupStarted{}),      // 11: refused
	)...)
	c := fsm.NewChecker(nil)
	for _, r := range recs {
		c.Record(r)
	}
	if len(c.Violations) != 2 || c.Violations[0].Seq != 9 || c.Violations[1].Seq != 11 {
		t.Fatalf("violations %v; want records 9 and 11", c.Violations)
	}
	if c.State.Tasks["t1"].Container("app").Known != event.StatusStopped || c.State.LastSeq != 11 {
		t.Fatal("the checker did not apply the sound record between the two bad ones")
	}
}

func TestRestoreRefusesDamagedSnapshots(t *testing.T) {
	st := fsm.New()
	recs := upToRunning()
	recs[2] = rec("t1", "app", &event.ContainerTransitioned{From: "NONE", To: "PULLED", ImageID: "sha256:web", ImageDigest: "sha256:dweb", ImagePulled: true})
	for _, r := range stream(recs...) {
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	good, _ := st.Snapshot()
	for name, damage := range map[string]func(string) string{
		"unknown status":         func(s string) string { return strings.Replace(s, `"known":"RUNNING"`, `"known":"RUNING"`, 1) },
		"sent ahead of known":    func(s string) string { return strings.Replace(s, `"sent":"NONE"`, `"sent":"STOPPED"`, 1) },
		"newer version":          func(s string) string { return strings.Replace(s, `"version":3`, `"version":4`, 1) },
		"truncated":              func(s string) string { return s[:len(s)/2] },
		"unknown field":          func(s string) string { return strings.Replace(s, `"version":3`, `"version":3,"x":1`, 1) },
		"image under another id": func(s string) string { return strings.Replace(s, `"id":"sha256:web"`, `"id":"sha256:other"`, 1) },
	} {
		bad := damage(string(good))
		if bad == string(good) {
			t.Fatalf("%s: damage did not apply", name)
		}
		if _, err := fsm.Restore([]byte(bad)); err == nil {
			t.Errorf("%s: restore accepted a damaged snapshot", name)
		}
	}
	if _, err := fsm.Restore(good); err != nil {
		t.Fatalf("restore of a sound snapshot: %v", err)
	}
}

// The projection is pure: nothing it imports, directly or not, does I/O of its own (fmt's use
// of os aside), reads a clock for it or logs.
func TestProjectionImportsNoIO(t *testing.T) {
	direct, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(direct)) {
		switch dep {
		case "os", "io", "net", "log", "syscall", "math/rand", "math/rand/v2", "sync":
			t.Errorf("internal/fsm imports %s", dep)
		}
	}
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		src, _ := os.ReadFile(f)
		if !strings.HasSuffix(f, "_test.go") && strings.Contains(string(src), "time.Now(") {
			t.Errorf("%s reads the clock: now must be passed in", f)
		}
	}
	all, _ := exec.Command("go", "list", "-deps", ".").Output()
	for _, dep := range strings.Fields(string(all)) {
		if strings.HasPrefix(dep, "net") || strings.Contains(dep, "bbolt") || strings.Contains(dep, "zerolog") || dep == "os/exec" {
			t.Errorf("internal/fsm depends on %s", dep)
		}
	}
}

func TestDiagramComesFromTheTables(t *testing.T) {
	d, err := fsm.Diagram()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"STOPPED_ACKED --> CLEANING", "STOPPED --> STOPPED_ACKED", "NONE --> STOPPED"} {
		if !strings.Contains(d, want) {
			t.Errorf("diagram lacks %q:\n%s", want, d)
		}
	}
}

// Image collection's promises, as `journal verify` checks them: only an image the agent
// pulled is removed, and never one a task that is not cleaned uses.
func TestCheckerNamesImageRemovalDefects(t *testing.T) {
	pulled := upToRunning()
	pulled[2] = rec("t1", "app", &event.ContainerTransitioned{From: "NONE", To: "PULLED", ImageID: "sha256:web", ImageDigest: "sha256:dweb", ImagePulled: true})
	cases := []struct {
		name  string
		head  []event.Record
		rule  fsm.Rule
		atSeq uint64
	}{
		{"an image the agent did not pull", upToRunning(), fsm.RuleImageNotPulled, 9},
		{"an image a live task uses", pulled, fsm.RuleImageInUse, 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fsm.NewChecker(nil)
			for _, r := range stream(append(tc.head, rec("", "", &event.ImageRemoved{ImageID: "sha256:web"}))...) {
				c.Record(r)
			}
			if len(c.Violations) != 1 {
				t.Fatalf("want exactly one violation, got %v", c.Violations)
			}
			if v := c.Violations[0]; v.Rule != tc.rule || v.Seq != tc.atSeq {
				t.Fatalf("got %s; want rule %s at record %d", v, tc.rule, tc.atSeq)
			}
		})
	}
}

// A container the runtime rolled back before it started is made again once, and only such a
// one: each rule of container_rolled_back and of CREATED → CREATED, broken on purpose.
func TestRollbackRules(t *testing.T) {
	created := upToRunning()[:6]
	created[4].Event = &event.ContainerTransitioned{From: "PULLED", To: "CREATED", RuntimeID: "r1"}
	back := func(id string) event.Record { return rec("t1", "app", &event.ContainerRolledBack{RuntimeID: id}) }
	again := func(id string) event.Record {
		return rec("t1", "app", &event.ContainerTransitioned{From: "CREATED", To: "CREATED", RuntimeID: id})
	}
	start := rec("t1", "app", &event.CallStarted{Call: "start"})
	cases := []struct {
		name  string
		tail  []event.Record
		atSeq uint64 // 0: no violation
	}{
		{"rolled back, made again, run", []event.Record{back("r1"), again("r2"), rec("t1", "app", ctr("CREATED", "RUNNING"))}, 0},
		{"made again without a rollback", []event.Record{again("r2")}, 7},
		{"made again without an id", []event.Record{back("r1"), again("")}, 8},
		{"made again twice", []event.Record{back("r1"), again("r2"), again("r3")}, 9},
		{"rolled back twice", []event.Record{back("r1"), again("r2"), back("r2")}, 9},
		{"rolled back while its start is in flight", []event.Record{start, back("r1")}, 8},
		{"rolled back another container", []event.Record{back("r9")}, 7},
		{"rolled back after it ran", []event.Record{rec("t1", "app", ctr("CREATED", "RUNNING")), back("r1")}, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fsm.NewChecker(nil)
			for _, r := range stream(append(slices.Clone(created), tc.tail...)...) {
				c.Record(r)
			}
			switch {
			case tc.atSeq == 0 && len(c.Violations) > 0:
				t.Fatalf("a valid rollback refused: %v", c.Violations)
			case tc.atSeq != 0 && (len(c.Violations) == 0 || c.Violations[0].Seq != tc.atSeq || c.Violations[0].Rule != fsm.RuleStatusOrder):
				t.Fatalf("got %v; want an illegal transition at record %d", c.Violations, tc.atSeq)
			}
		})
	}
}

// A fence — a container removed before its task's STOPPED is settled — is allowed only of a
// container that never ran (CREATED), a start of which was asked (it may land late), with none
// in flight (its outcome, or an inspect, settles that first), and of that container's id: any
// other removal before cleanup would take a container the control plane has not settled.
func TestCheckerAllowsOnlyAFenceOfAnUnrunStart(t *testing.T) {
	created := []event.Record{
		rec("", "", &event.PayloadReceived{MessageID: "m-1"}),
		rec("t1", "", &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "app", Image: "x", Essential: true}}}),
		rec("t1", "app", ctr("NONE", "PULLED")), rec("t1", "", tsk("NONE", "PULLED")),
		rec("t1", "app", &event.ContainerTransitioned{From: "PULLED", To: "CREATED", RuntimeID: "r1"}), rec("t1", "", tsk("PULLED", "CREATED")),
	}
	asked := rec("t1", "app", &event.CallStarted{Call: "start"})
	ended := rec("t1", "app", &event.CallEnded{Call: "start", Reason: "the runtime shows it never started"})
	fence := func(id string) event.Record {
		return rec("t1", "app", &event.ContainerRemoved{RuntimeID: id, Fence: true})
	}
	stopped := rec("t1", "app", &event.ContainerTransitioned{From: "CREATED", To: "STOPPED", Reason: "not started"})
	for _, tc := range []struct {
		name  string
		tail  []event.Record
		atSeq uint64 // 0: no violation
	}{
		{"its start asked and ended unseen", []event.Record{asked, ended, fence("r1"), stopped}, 0},
		{"no start asked", []event.Record{fence("r1"), stopped}, 7},
		{"its start in flight", []event.Record{asked, fence("r1")}, 8},
		{"it ran", []event.Record{asked, rec("t1", "app", ctr("CREATED", "RUNNING")), fence("r1")}, 9},
		{"another container's id", []event.Record{asked, ended, fence("r0")}, 9},
		{"fenced twice", []event.Record{asked, ended, fence("r1"), fence("r1")}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fsm.NewChecker(nil)
			for _, r := range stream(append(slices.Clone(created), tc.tail...)...) {
				c.Record(r)
			}
			switch {
			case tc.atSeq == 0 && len(c.Violations) > 0:
				t.Fatalf("a fence of a container that never ran, its start asked, refused: %v", c.Violations)
			case tc.atSeq != 0 && (len(c.Violations) != 1 || c.Violations[0].Seq != tc.atSeq):
				t.Fatalf("want one violation at record %d, got %v", tc.atSeq, c.Violations)
			}
		})
	}
}

// A container is made again (CREATED → CREATED with a new id) after a fence only when the
// fence says so (again=true), of its own id, in a task not on its way down, and once a fence:
// its starts are counted afresh, so a third start asked is of the new container.
func TestCheckerAllowsAContainerMadeAgainOnlyRightAfterItsFence(t *testing.T) {
	asked := rec("t1", "app", &event.CallStarted{Call: "start"})
	ended := rec("t1", "app", &event.CallEnded{Call: "start", Reason: "the runtime shows it never started"})
	created := []event.Record{
		rec("", "", &event.PayloadReceived{MessageID: "m-1"}),
		rec("t1", "", &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "app", Image: "x", Essential: true}}}),
		rec("t1", "app", ctr("NONE", "PULLED")), rec("t1", "", tsk("NONE", "PULLED")),
		rec("t1", "app", &event.ContainerTransitioned{From: "PULLED", To: "CREATED", RuntimeID: "r1"}), rec("t1", "", tsk("PULLED", "CREATED")),
		asked, ended, asked, ended, // records 7–10
	}
	fence := func(id string, again bool) event.Record {
		return rec("t1", "app", &event.ContainerRemoved{RuntimeID: id, Fence: true, Again: again})
	}
	again := func(id string) event.Record {
		return rec("t1", "app", &event.ContainerTransitioned{From: "CREATED", To: "CREATED", RuntimeID: id})
	}
	stop := rec("t1", "", &event.DesiredChanged{To: event.StatusStopped})
	running := []event.Record{rec("t1", "app", ctr("CREATED", "RUNNING")), rec("t1", "", tsk("CREATED", "RUNNING"))}
	for _, tc := range []struct {
		name  string
		tail  []event.Record
		atSeq uint64 // 0: no violation
	}{
		{"fenced to be made again, made again, started and run", append([]event.Record{fence("r1", true), again("r2"), asked}, running...), 0},
		{"fenced twice and made again twice, each after two starts", []event.Record{fence("r1", true), again("r2"), asked, ended, asked, ended, fence("r2", true), again("r3"), asked}, 0},
		{"made again without a fence", []event.Record{again("r2")}, 11},
		{"made again after a fence to stop it", []event.Record{fence("r1", false), again("r2")}, 12},
		{"fenced to be made again in a task stopped", []event.Record{stop, fence("r1", true)}, 12},
		{"made again twice after one fence", []event.Record{fence("r1", true), again("r2"), again("r3")}, 13},
		{"a start of the container fenced, before it is made again", []event.Record{fence("r1", true), asked}, 12},
		{"made again with no id", []event.Record{fence("r1", true), rec("t1", "app", ctr("CREATED", "CREATED"))}, 12},
		{"fenced to be made again while its start is in flight", []event.Record{asked, fence("r1", true)}, 12},
		{"the old container fenced again after it is made again", []event.Record{fence("r1", true), again("r2"), asked, ended, fence("r1", true)}, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fsm.NewChecker(nil)
			for _, r := range stream(append(slices.Clone(created), tc.tail...)...) {
				c.Record(r)
			}
			switch {
			case tc.atSeq == 0 && len(c.Violations) > 0:
				t.Fatalf("a container made again after its fence refused: %v", c.Violations)
			case tc.atSeq != 0 && (len(c.Violations) == 0 || c.Violations[0].Seq != tc.atSeq):
				t.Fatalf("want a violation at record %d first, got %v", tc.atSeq, c.Violations)
			}
		})
	}
}

// A container a start of which was asked may have run (the start landing late) before it
// went: gone, it is recorded STOPPED, never rolled back and created again — which would run
// the task's container a second time. (Never asked, it is rolled back: the create was lost.)
func TestAContainerWhoseStartWasAskedIsNeverRolledBack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		asked   bool
		rollsBk bool
	}{{"its start asked", true, false}, {"no start asked", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			st := fsm.New()
			recs := []event.Record{
				rec("", "", &event.PayloadReceived{MessageID: "m-1"}),
				rec("t1", "", &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "app", Image: "x", Essential: true}}}),
				rec("t1", "app", ctr("NONE", "PULLED")), rec("t1", "", tsk("NONE", "PULLED")),
				rec("t1", "app", &event.ContainerTransitioned{From: "PULLED", To: "CREATED", RuntimeID: "r1"}), rec("t1", "", tsk("PULLED", "CREATED")),
			}
			if tc.asked {
				recs = append(recs, rec("t1", "app", &event.CallStarted{Call: "start"}), rec("t1", "app", &event.CallEnded{Call: "start"}))
			}
			for _, r := range stream(recs...) {
				if err := st.Apply(r); err != nil {
					t.Fatal(err)
				}
			}
			v := st.Step(t0, fsm.RuntimeObserved{Containers: []fsm.Observed{{ID: "r1", Task: "t1", Container: "app", Gone: true}}})
			rolled := slices.ContainsFunc(v.Records, func(r event.Record) bool { _, ok := r.Event.(*event.ContainerRolledBack); return ok })
			if rolled != tc.rollsBk {
				t.Fatalf("gone after a restart, rolled back: %v; want %v (records %v)", rolled, tc.rollsBk, v.Records)
			}
		})
	}
}
