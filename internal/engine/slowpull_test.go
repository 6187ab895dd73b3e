package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/simruntime"
	"github.com/agentd/agentd/internal/testrig"
)

// pollFrom is a control plane whose polls hand out the payloads sent to it, one a poll; it
// settles every report.
func pollFrom(payloads chan protocol.Payload) *testrig.ControlPlane {
	return &testrig.ControlPlane{Payloads: func(ctx context.Context, _ time.Duration) ([]protocol.Payload, error) {
		select {
		case p := <-payloads:
			return []protocol.Payload{p}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
}

// A registry that hangs holds every pull of its images; the agent must still stop what the
// control plane stops. With pulls on the same slots as every other call, a dozen hung pulls
// would take them all and the stop would wait for the registry.
func TestSlowPullsNeverHoldUpAStop(t *testing.T) {
	dir := t.TempDir()
	rt, err := simruntime.Open(dir, "agent-slow", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	unhang := func() { once.Do(func() { close(release) }) }
	defer unhang()
	rt.SetPullFaults(func(image string, _ int) simruntime.PullFault {
		if image == "hung/app:1" {
			return simruntime.PullFault{Took: time.Hour}
		}
		return simruntime.PullFault{}
	})
	rt.SetSleep(func(ctx context.Context, d time.Duration) error {
		if d < time.Hour {
			return nil
		}
		select { // the hung registry: until the test ends
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	j := openJournal(t, dir, new(atomic.Bool))
	defer j.Close()
	payloads := make(chan protocol.Payload, 4)
	cp := pollFrom(payloads)
	e := engine.New(engine.Config{AgentID: "agent-slow", Seed: 1, CleanupWait: time.Hour}, j, rt, cp, nil, nil, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		unhang()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	send := func(id string, tasks ...protocol.Task) {
		var raw []json.RawMessage
		for _, task := range tasks {
			b, _ := json.Marshal(task)
			raw = append(raw, b)
		}
		payloads <- protocol.Payload{MessageID: id, Tasks: raw}
	}
	// Every state awaited is journaled: wait for the next commit, not for time.
	await := func(what string, ok func(*fsm.State) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			changed := j.Changed() // before the query: a commit in between is not missed
			var met bool
			if err := e.Query(ctx, func(st *fsm.State) { met = ok(st) }); err != nil {
				t.Fatal(err)
			}
			if met {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("%s: not within 20 s", what)
			}
		}
	}
	runner := protocol.Task{ARN: "task/runner", DesiredStatus: "RUNNING", Containers: []protocol.Container{{Name: "app", Image: "quick/app:1", Command: []string{"run"}}}}
	send("m-1", runner)
	await("task/runner RUNNING", func(st *fsm.State) bool {
		return st.Tasks[runner.ARN] != nil && st.Tasks[runner.ARN].Known == event.StatusRunning
	})
	var hung []protocol.Task
	for i := range 12 {
		hung = append(hung, protocol.Task{ARN: fmt.Sprintf("task/hung-%02d", i), DesiredStatus: "RUNNING",
			Containers: []protocol.Container{{Name: "app", Image: "hung/app:1"}}})
	}
	send("m-2", hung...)
	await("the hung tasks assigned", func(st *fsm.State) bool { return len(st.Tasks) == 13 })
	runner.DesiredStatus = "STOPPED"
	send("m-3", runner)
	await("task/runner STOPPED while a dozen pulls hang", func(st *fsm.State) bool {
		return st.Tasks[runner.ARN].Known.Rank() >= event.StatusStopped.Rank()
	})
}
