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
// a running container changes nothing; a stop before the first start is lost, as in Sim.
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

func newTestSim(t *testing.T) (*Sim, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	s, err := NewSim(t.TempDir(), "agent-1", c.Now)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// Sim behaves like Docker where it matters: its Docker-like start runs an exited container
// again (a new incarnation, the earlier exit kept in the stream), and Start applies the same
// guard as the Docker runtime. Before, Sim's start of an exited container was a silent no-op,
// kinder than Docker, which hid a re-dispatched start.
func TestSimSecondStartIsRefusedAndDockerStartRunsAgain(t *testing.T) {
	s, c := newTestSim(t)
	ctx := context.Background()
	id := run(t, s, "task/once", "exit", "3")
	err := s.Start(ctx, id)
	if !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second start: %v; want ErrAlreadyStarted", err)
	}
	if len(s.Reruns()) != 0 {
		t.Fatalf("reruns %v after a refused start", s.Reruns())
	}
	c.add(time.Second)
	if err := s.StartUnguarded(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := s.Reruns(); len(got) != 1 || got[0] != id {
		t.Fatalf("Docker's start of an exited container: reruns %v; want %s (it runs again)", got, id)
	}
	exits, _ := s.ExitsAfter(0)
	if len(exits) != 2 {
		t.Fatalf("exit stream %+v; want both runs' exits", exits)
	}
	// Running: Start is a no-op success, the same incarnation.
	runner := run(t, s, "task/runs", "run")
	if err := s.Start(ctx, runner); err != nil {
		t.Fatal(err)
	}
	// Stopped by the agent: never started again either.
	if err := s.Stop(ctx, runner, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, runner); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("start after stop: %v; want ErrAlreadyStarted", err)
	}
}

// A stop decided while a start is in flight can land first: like Docker's, it finds nothing
// running and does nothing, and the start then runs the container.
func TestSimStopBeforeStartIsLost(t *testing.T) {
	s, _ := newTestSim(t)
	ctx := context.Background()
	id, err := s.Create(ctx, CreateSpec{Task: "task/race", Container: event.ContainerSpec{Name: "app", Image: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Inspect(ctx, id); !st.Running {
		t.Fatalf("%+v; want running: the stop that came first stopped nothing", st)
	}
}

// A call can time out and still take effect, or be slow past its caller's deadline.
func TestSimCallsTimeOutAndStillTakeEffect(t *testing.T) {
	s, _ := newTestSim(t)
	ctx := context.Background()
	id, err := s.Create(ctx, CreateSpec{Task: "task/slow", Container: event.ContainerSpec{Name: "app", Image: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	s.SetFaults(func(op, _ string) SimFault {
		if op == "start" {
			return SimFault{Err: context.DeadlineExceeded}
		}
		return SimFault{}
	})
	err = s.Start(ctx, id)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("start: %v; want a timeout", err)
	}
	if st, _ := s.Inspect(ctx, id); !st.Running {
		t.Fatalf("%+v; the timed-out start took effect", st)
	}
	// The retry of the timed-out start finds it running: no second run.
	s.SetFaults(nil)
	if err := s.Start(ctx, id); err != nil || len(s.Reruns()) != 0 {
		t.Fatalf("retried start: %v, reruns %v", err, s.Reruns())
	}
	// Slow: the caller's deadline passes while the stop is carried out.
	s.SetFaults(func(op, _ string) SimFault { return SimFault{Delay: time.Hour} })
	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.Stop(dctx, id, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow stop: %v; want the caller's deadline", err)
	}
	s.SetFaults(nil)
	if st, _ := s.Inspect(ctx, id); st.Running || st.ExitCode != 143 {
		t.Fatalf("%+v; the slow stop took effect", st)
	}
	// And one that fails before it takes effect.
	id2, _ := s.Create(ctx, CreateSpec{Task: "task/noeffect", Container: event.ContainerSpec{Name: "app", Image: "img"}})
	s.SetFaults(func(op, _ string) SimFault { return SimFault{NoEffect: true} })
	if err := s.Start(ctx, id2); err == nil {
		t.Fatal("a failing start succeeded")
	}
	s.SetFaults(nil)
	if st, _ := s.Inspect(ctx, id2); st.Running || !st.StartedAt.IsZero() {
		t.Fatalf("%+v; a start that failed before taking effect ran it", st)
	}
}

// The sim file keeps a rerun across a reopen (a restarted agent sees the same world).
func TestSimRerunsSurviveReopen(t *testing.T) {
	c := &clock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	s, err := NewSim(dir, "agent-1", c.Now)
	if err != nil {
		t.Fatal(err)
	}
	id := run(t, s, "task/x", "exit", "1")
	c.add(time.Second)
	if err := s.StartUnguarded(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	s2, err := NewSim(dir, "agent-1", c.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.Reruns(); len(got) != 1 {
		t.Fatalf("after reopen: reruns %v", got)
	}
	if exits, _ := s2.ExitsAfter(0); len(exits) != 2 {
		t.Fatalf("after reopen: exits %+v", exits)
	}
}
