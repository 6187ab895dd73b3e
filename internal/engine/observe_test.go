package engine_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/runtime"
)

// What the runtime shows of a container reaches the core whole, the same way for reconcile
// and for a call's outcome: a field lost here is an OOM kill recorded as a plain exit, a
// container's ports missing from its RUNNING, or an exit code missing from its STOPPED.
func TestTheRuntimesViewReachesTheCoreWhole(t *testing.T) {
	bound := []event.NetworkBinding{{ContainerPort: 80, HostPort: 8080, Protocol: "tcp"}}
	for _, s := range []runtime.State{
		{ID: "c1", Task: "t", Container: "app", Exited: true, ExitCode: 137, OOMKilled: true, StartedAt: time.Unix(1, 0)},
		{ID: "c2", Task: "t", Container: "web", Running: true, Bindings: bound},
	} {
		o := engine.Observed(s)
		want := fsm.Observed{ID: s.ID, Task: s.Task, Container: s.Container, Running: s.Running, Exited: s.Exited, ExitCode: s.ExitCode, OOMKilled: s.OOMKilled, Bindings: s.Bindings}
		if !reflect.DeepEqual(o, want) {
			t.Fatalf("observed(%+v) = %+v; want %+v", s, o, want)
		}
		var r fsm.Result
		r.Saw(o)
		if r.Running != s.Running || r.Exited != s.Exited || r.ExitCode != s.ExitCode || r.OOMKilled != s.OOMKilled || !reflect.DeepEqual(r.Bindings, s.Bindings) {
			t.Fatalf("a call's outcome saw %+v of %+v", r, s)
		}
	}
}
