package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/simruntime"
)

// A fence's outcome says what it found, as the core reads it: a container never started is
// removed (ok, not running: the core records it fenced, then STOPPED or made again); one a
// late start runs is refused, and the outcome says it runs (the core records it RUNNING —
// never fenced and STOPPED while it runs); one a late start ran to its exit is refused too,
// and the outcome says it exited, with its code (the core records it RUNNING, then STOPPED
// with that code — never made again, which would run it twice); one gone is vanished.
func TestAFenceSaysWhatItFound(t *testing.T) {
	ctx := context.Background()
	rt, err := simruntime.Open(t.TempDir(), "agent-fence", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	const image = "agentd-testbox:latest"
	if _, err := rt.Preload(image); err != nil {
		t.Fatal(err)
	}
	create := func(task string, command ...string) string {
		if command == nil {
			command = []string{"run"}
		}
		id, err := rt.Create(ctx, runtime.CreateSpec{Task: task, Container: event.ContainerSpec{Name: "app", Image: image, Command: command}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	fence := func(task, id string) fsm.Result {
		return engine.Call(ctx, rt, fsm.Action{Kind: fsm.ActFence, Task: task, Container: "app", RuntimeID: id}, time.Second)
	}
	never := create("t-never")
	if r := fence("t-never", never); r.Kind != fsm.Succeeded || r.Running || r.Exited {
		t.Fatalf("fence of a container never started: %+v; want ok, not running", r)
	}
	if r := fence("t-never", never); r.Kind != fsm.Vanished {
		t.Fatalf("fence of a container gone: %+v; want vanished", r)
	}
	landed := create("t-landed")
	if err := rt.Start(ctx, landed); err != nil {
		t.Fatal(err)
	}
	if r := fence("t-landed", landed); r.Kind != fsm.Succeeded || !r.Running {
		t.Fatalf("fence of a container a late start runs: %+v; want ok, running", r)
	}
	if st, err := rt.Inspect(ctx, landed); err != nil || !st.Running {
		t.Fatalf("after a refused fence: %+v, %v; want it running", st, err)
	}
	ended := create("t-ended", "exit", "3")
	if err := rt.Start(ctx, ended); err != nil {
		t.Fatal(err)
	}
	if r := fence("t-ended", ended); r.Kind != fsm.Succeeded || !r.Exited || r.ExitCode != 3 {
		t.Fatalf("fence of a container a late start ran to its exit: %+v; want ok, exited 3", r)
	}
	if _, err := rt.Inspect(ctx, ended); err != nil {
		t.Fatalf("after a refused fence of an exited container: %v; want it kept", err)
	}
}
