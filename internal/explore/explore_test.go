package explore

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// The bounds of `make check-model` and of .ci/run, as flags (go test ./internal/explore
// -run TestCheckModel -explore.model -explore.tasks=3 …).
var (
	checkModel = flag.Bool("explore.model", false, "run TestCheckModel: the exhaustive search within the bounds below")
	flagTasks  = flag.Int("explore.tasks", 3, "tasks")
	flagCtrs   = flag.Int("explore.containers", 2, "containers a task")
	flagDepth  = flag.Int("explore.depth", 40, "moves on a path at most")
	flagFaults = flag.Int("explore.faults", 2, "fault moves on a path at most")
	flagCrash  = flag.Int("explore.crashes", 1, "crashes on a path at most")
	flagStates = flag.Int("explore.states", 1_000_000, "distinct states at most (0: no bound)")
	flagTime   = flag.Duration("explore.timeout", 10*time.Minute, "time at most")
	flagLive   = flag.Int("explore.liveness-every", 64, "a fair run from one new state in this many")
	flagFront  = flag.Int("explore.frontier", 10_000, "breadth first while a level holds at most this many states, then depth first (0: breadth first only)")
)

// Within small bounds the search is complete: every state of one task of one container,
// through any two faults and a crash, keeps every safety property, reaches no state where
// nothing can progress, and from every state checked a fair world cleans every task and
// settles every change. (make check-model searches wider bounds; these keep make test quick.)
func TestEveryStateWithinSmallBoundsIsSafe(t *testing.T) {
	b := Bounds{Tasks: 1, Containers: 1, Depth: 40, Faults: 2, Crashes: 1, LivenessEvery: 16, Timeout: 30 * time.Second}
	r := Search(b)
	t.Log(r)
	if r.Violation != "" {
		t.Fatalf("%s\n%s\n%s", r.Violation, r.End, Script(b, r.Trace, r.Violation))
	}
	if !r.Complete && r.Elapsed < 30*time.Second {
		t.Fatalf("the search stopped short of its bounds: %s", r)
	}
}

// TestCheckModel is make check-model: the exhaustive search within the flags' bounds, 0
// violations. Its figures are the report's.
func TestCheckModel(t *testing.T) {
	if !*checkModel {
		t.Skip("run with -explore.model (make check-model)")
	}
	b := Bounds{Tasks: *flagTasks, Containers: *flagCtrs, Depth: *flagDepth, Faults: *flagFaults, Crashes: *flagCrash,
		MaxStates: *flagStates, Timeout: *flagTime, LivenessEvery: *flagLive, Frontier: *flagFront}
	r := Search(b)
	t.Logf("bounds: %d tasks x %d containers, depth %d, %d faults, %d crashes a path, frontier %d\n%s", b.Tasks, b.Containers, b.Depth, b.Faults, b.Crashes, b.Frontier, r)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Violation != "" {
		t.Fatalf("%s\nends in:\n%s\nas an engine script:\n%s", r.Violation, r.End, Script(b, r.Trace, r.Violation))
	}
	if r.Depth < b.Depth && !r.Complete {
		t.Fatalf("the search stopped at depth %d, short of its bound %d: %s", r.Depth, b.Depth, r)
	}
}

// Symmetry over task ids: a state and the same state with its tasks renamed are one state;
// a state with a task one step further is another.
func TestTheKeyIsBlindToTaskIDsOnly(t *testing.T) {
	b := Bounds{Tasks: 2, Containers: 1, Faults: 1, Crashes: 1}
	first, second := initial(b), initial(b)
	first.play(move{k: mPayload, i: 0}, b)
	second.play(move{k: mPayload, i: 1}, b)
	if first.key(b) != second.key(b) {
		t.Fatal("task t1 assigned and task t2 assigned are two states: the key sees task ids")
	}
	second.play(move{k: mExec, i: 0}, b)
	if first.key(b) == second.key(b) {
		t.Fatal("a pull done and a pull not done are one state: the key misses the world")
	}
}

// A trace becomes an engine script: the engine's commands, the world's doings as comments.
func TestATraceIsAnEngineScript(t *testing.T) {
	b := Bounds{Tasks: 1, Containers: 1, Faults: 1, Crashes: 1}
	trace := []move{{k: mPayload}, {k: mExec}, {k: mAnswer}, {k: mExec}, {k: mAnswer}, {k: mStop}, {k: mCrash}, {k: mRecover}, {k: mAccept}}
	got := Script(b, trace, "none")
	for _, want := range []string{"agent wait=1m\n----\n", "payload id=m-t1\n{", "# the runtime does pull t1/c1", "outcome pull t1/c1 ok\n----",
		"payload id=s-t1\n{", "outcome create t1/c1 ok id=rt-t1-c1-1\n", "runtime t1/c1 created\n----\nok\n", "crash\n----", "answer accept=all\n----", "verify\n----"} {
		if !strings.Contains(got, want) {
			t.Errorf("the script lacks %q:\n%s", want, got)
		}
	}
}

// The world is the runtime's: an image a container holds (a dead agent's create that landed
// after its task was cleaned, say) is not removed, as Docker and Podman refuse it; a fence
// removes a container unless it has started (it runs, or ran and exited), and a start after
// it finds nothing; the agent making a fenced container again makes one not removed.
func TestTheWorldRefusesWhatTheRuntimeRefuses(t *testing.T) {
	var w world
	w.nCtrs = 1
	c := &w.tasks[0].ctrs[0]
	create := fsm.Action{Kind: fsm.ActCreate, Task: "t1", Container: "c1"}
	w.tasks[0].image = 1
	w.execute(create, 1)
	if r := w.execute(fsm.Action{Kind: fsm.ActRemoveImage, Container: imageID(0)}, 1); r.Kind != fsm.Refused || w.tasks[0].image != 1 {
		t.Fatalf("an image a container holds removed: %+v, image %d", r, w.tasks[0].image)
	}
	start := fsm.Action{Kind: fsm.ActStart, Task: "t1", Container: "c1", RuntimeID: runtimeID(0, 0, 1)}
	fence := fsm.Action{Kind: fsm.ActFence, Task: "t1", Container: "c1", RuntimeID: runtimeID(0, 0, 1)}
	if r := w.execute(fence, 1); r.Kind != fsm.Succeeded || r.Running || c.exists {
		t.Fatalf("a fence of a container never started: %+v, exists %v", r, c.exists)
	}
	if r := w.execute(start, 1); r.Kind != fsm.Vanished || c.starts != 0 {
		t.Fatalf("a start after the fence: %+v, starts %d", r, c.starts)
	}
	again := create
	again.From = event.StatusCreated
	w.execute(again, 1)
	if c.removed {
		t.Fatal("a fenced container made again is still removed: the image check would miss its task")
	}
	start.RuntimeID, fence.RuntimeID = runtimeID(0, 0, 2), runtimeID(0, 0, 2)
	w.execute(start, 1)
	if r := w.execute(fence, 1); r.Kind != fsm.Succeeded || !r.Running || !c.exists {
		t.Fatalf("a fence of a running container: %+v, exists %v", r, c.exists)
	}
	c.running, c.exit = false, 3
	if r := w.execute(fence, 1); r.Kind != fsm.Succeeded || !r.Exited || r.ExitCode != 3 || !c.exists {
		t.Fatalf("a fence of a container that ran and exited: %+v, exists %v", r, c.exists)
	}
}
