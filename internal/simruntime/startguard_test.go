package simruntime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// The simulated runtime behaves like Docker where it matters: its Docker-like start runs an exited container
// again (a new incarnation, the earlier exit kept in the stream), and Start applies the same
// guard as the Docker runtime. Before, its start of an exited container was a silent no-op,
// kinder than Docker, which hid a re-dispatched start.
func TestSimSecondStartIsRefusedAndDockerStartRunsAgain(t *testing.T) {
	s, c := newTestRuntime(t)
	ctx := context.Background()
	id := run(t, s, "task/once", "exit", "3")
	err := s.Start(ctx, id)
	if !errors.Is(err, runtime.ErrAlreadyStarted) {
		t.Fatalf("second start: %v; want docker.ErrAlreadyStarted", err)
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
	exits, _ := s.ExitsAfter(runtime.ExitMark{})
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
	if err := s.Start(ctx, runner); !errors.Is(err, runtime.ErrAlreadyStarted) {
		t.Fatalf("start after stop: %v; want docker.ErrAlreadyStarted", err)
	}
}

// A call can time out and still take effect, or be slow past its caller's deadline.
func TestSimCallsTimeOutAndStillTakeEffect(t *testing.T) {
	s, _ := newTestRuntime(t)
	ctx := context.Background()
	id, err := s.Create(ctx, runtime.CreateSpec{Task: "task/slow", Container: event.ContainerSpec{Name: "app", Image: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	s.SetFaults(func(op, _ string) Fault {
		if op == "start" {
			return Fault{Err: context.DeadlineExceeded}
		}
		return Fault{}
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
	s.SetFaults(func(op, _ string) Fault { return Fault{Delay: time.Hour} })
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
	id2, _ := s.Create(ctx, runtime.CreateSpec{Task: "task/noeffect", Container: event.ContainerSpec{Name: "app", Image: "img"}})
	s.SetFaults(func(op, _ string) Fault { return Fault{NoEffect: true} })
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
	s, err := Open(dir, "agent-1", c.Now)
	if err != nil {
		t.Fatal(err)
	}
	id := run(t, s, "task/x", "exit", "1")
	c.add(time.Second)
	if err := s.StartUnguarded(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, "agent-1", c.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.Reruns(); len(got) != 1 {
		t.Fatalf("after reopen: reruns %v", got)
	}
	if exits, _ := s2.ExitsAfter(runtime.ExitMark{}); len(exits) != 2 {
		t.Fatalf("after reopen: exits %+v", exits)
	}
}
