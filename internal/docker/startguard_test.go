package docker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// On the real engine: Docker itself starts an exited container again (a second run), which is
// what Engine.Start's guard stands in front of. (The guard itself, a start of a running
// container and a stop before the start are the runtime contract's: runtimetest.)
func TestDockerSecondStartOfAnExitedContainerIsRefused(t *testing.T) {
	e, _ := dockerEngine(t)
	ctx := context.Background()
	id := start(t, e, "task/once", "exit", "3")
	first := waitExit(t, e, id)
	if first.StartedAt.IsZero() || first.ExitCode != 3 {
		t.Fatalf("after one run: %+v", first)
	}
	err := e.Start(ctx, id)
	if !errors.Is(err, runtime.ErrAlreadyStarted) || !strings.Contains(err.Error(), "exited 3") {
		t.Fatalf("second start: %v; want ErrAlreadyStarted naming the exit", err)
	}
	after, err := e.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !after.StartedAt.Equal(first.StartedAt) || !after.FinishedAt.Equal(first.FinishedAt) || after.Running {
		t.Fatalf("the refused start ran it again: before %+v, after %+v", first, after)
	}
	// The edge the guard stands in front of: Docker's own start runs it again.
	if _, err := e.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	again := waitExit(t, e, id)
	if !again.StartedAt.After(first.StartedAt) {
		t.Fatalf("Docker's start of an exited container did not run it again (%v, then %v): the guard would be moot", first.StartedAt, again.StartedAt)
	}
}

// An env name holding "=" (from a journal older than the rule) never reaches Docker.
func TestDockerEnvNameWithEqualsIsRefused(t *testing.T) {
	e, _ := dockerEngine(t)
	_, err := e.Create(context.Background(), runtime.CreateSpec{Task: "task/env", Container: event.ContainerSpec{Name: "app", Image: testbox,
		Env: map[string]string{"PATH=/evil:": "x"}}})
	if err == nil || !strings.Contains(err.Error(), "PATH=/evil:") {
		t.Fatalf("create with env name PATH=/evil:: %v", err)
	}
}
