package docker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
)

// On the real engine: Docker itself starts an exited container again (a second run), and
// Engine.Start refuses to, with ErrAlreadyStarted, leaving the container as it was. A start of
// a running container changes nothing; a stop before the first start is lost, as in the
// simulated runtime.
func TestDockerSecondStartOfAnExitedContainerIsRefused(t *testing.T) {
	e, _ := dockerEngine(t)
	ctx := context.Background()
	id := start(t, e, "task/once", "exit", "3")
	first := waitExit(t, e, id)
	if first.StartedAt.IsZero() || first.ExitCode != 3 {
		t.Fatalf("after one run: %+v", first)
	}
	err := e.Start(ctx, id)
	if !errors.Is(err, ErrAlreadyStarted) || !strings.Contains(err.Error(), "exited 3") {
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

	// A running container: Start changes nothing and succeeds (the same incarnation).
	runner := start(t, e, "task/runs", "run")
	st1, _ := e.Inspect(ctx, runner)
	if err := e.Start(ctx, runner); err != nil {
		t.Fatalf("start of a running container: %v", err)
	}
	if st2, _ := e.Inspect(ctx, runner); !st2.StartedAt.Equal(st1.StartedAt) || !st2.Running {
		t.Fatalf("start of a running container changed it: %+v → %+v", st1, st2)
	}

	// A stop that lands before the start: nothing to stop, and the start then runs it.
	cid, err := e.Create(ctx, CreateSpec{Task: "task/race", Container: event.ContainerSpec{Name: "app", Image: testbox, Command: []string{"run"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(ctx, cid, time.Second); err != nil {
		t.Fatalf("stop of a created container: %v", err)
	}
	if err := e.Start(ctx, cid); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.Inspect(ctx, cid); !st.Running {
		t.Fatalf("after stop-then-start: %+v; Docker runs it", st)
	}
	for _, c := range []string{runner, cid} {
		if err := e.Stop(ctx, c, time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// An env name holding "=" (from a journal older than the rule) never reaches Docker.
func TestDockerEnvNameWithEqualsIsRefused(t *testing.T) {
	e, _ := dockerEngine(t)
	_, err := e.Create(context.Background(), CreateSpec{Task: "task/env", Container: event.ContainerSpec{Name: "app", Image: testbox,
		Env: map[string]string{"PATH=/evil:": "x"}}})
	if err == nil || !strings.Contains(err.Error(), "PATH=/evil:") {
		t.Fatalf("create with env name PATH=/evil:: %v", err)
	}
}
