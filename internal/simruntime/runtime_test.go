package simruntime

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// newTestRuntime is a simulated runtime on a clock the test moves.
func newTestRuntime(t *testing.T) (*Runtime, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	s, err := Open(t.TempDir(), "agent-1", c.Now)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func run(t *testing.T, s *Runtime, task string, cmd ...string) string {
	t.Helper()
	ctx := context.Background()
	id, err := s.Create(ctx, runtime.CreateSpec{Task: task, Container: event.ContainerSpec{Name: "app", Image: "img", Command: cmd}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestCommandWords(t *testing.T) {
	c := &clock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	s, err := Open(dir, "agent-1", c.Now)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	forever := run(t, s, "task/run")
	sleeper := run(t, s, "task/sleep", "sleep", "2s")
	failing := run(t, s, "task/code", "sleep", "2s", "3")
	quitter := run(t, s, "task/exit", "exit", "7")
	check := func(id string, running bool, code int) {
		t.Helper()
		st, err := s.Inspect(ctx, id)
		if err != nil || st.Running != running || (!running && st.ExitCode != code) {
			t.Fatalf("%s: %+v %v; want running=%v code=%d", id, st, err, running, code)
		}
	}
	check(quitter, false, 7)
	check(sleeper, true, 0)
	c.add(2 * time.Second)
	check(sleeper, false, 0)
	check(failing, false, 3)
	check(forever, true, 0)
	if err := s.Stop(ctx, forever, time.Second); err != nil {
		t.Fatal(err)
	}
	check(forever, false, 143)
	// Containers outlive the agent: a new Runtime over the same file sees them.
	s2, _ := Open(dir, "agent-1", c.Now)
	if st, err := s2.Inspect(ctx, forever); err != nil || st.ExitCode != 143 {
		t.Fatalf("after reopen: %+v %v", st, err)
	}
	// Create is idempotent by task and container name.
	again, _ := s2.Create(ctx, runtime.CreateSpec{Task: "task/run", Container: event.ContainerSpec{Name: "app", Image: "img"}})
	if again != forever || s2.Created() != 4 {
		t.Fatalf("second create of the same container: %s (created %d); want %s, 4", again, s2.Created(), forever)
	}
	// Another agent's runtime sees none of it and may not touch it.
	other, _ := Open(dir, "agent-2", c.Now)
	if l, _ := other.List(ctx); len(l) != 0 {
		t.Fatalf("agent-2 lists %d containers of agent-1", len(l))
	}
	if err := other.Remove(ctx, forever); err == nil {
		t.Fatal("agent-2 removed agent-1's container")
	}
	if _, err := other.Inspect(ctx, forever); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("agent-2 inspects agent-1's container: %v", err)
	}
	exits, _ := s2.ExitsAfter(runtime.ExitMark{})
	if len(exits) != 4 {
		t.Fatalf("%d exits; want 4", len(exits))
	}
	if err := s2.Remove(ctx, forever); err != nil {
		t.Fatal(err)
	}
	if err := s2.Remove(ctx, forever); err != nil {
		t.Fatalf("removing a removed container: %v; want success", err)
	}
}

func TestFailingImages(t *testing.T) {
	s, _ := Open(t.TempDir(), "a", nil)
	ctx := context.Background()
	if _, err := s.PullImage(ctx, "x/fail-pull:1", ""); err == nil {
		t.Fatal("fail-pull pulled")
	}
	if _, err := s.Create(ctx, runtime.CreateSpec{Task: "t", Container: event.ContainerSpec{Name: "c", Image: "fail-create"}}); err == nil {
		t.Fatal("fail-create created")
	}
	id, _ := s.Create(ctx, runtime.CreateSpec{Task: "t", Container: event.ContainerSpec{Name: "c", Image: "fail-start"}})
	if err := s.Start(ctx, id); err == nil {
		t.Fatal("fail-start started")
	}
}

// TestSimNameTakenByAnother: as on Docker, a name held by a container that is not this one —
// another agent's — fails the create with runtime.ErrNameTaken naming the holder; the agent's own
// container under the name is the create's answer (idempotent); and a container made under
// the name an older agent gave it is still found by its labels.
func TestSimNameTakenByAnother(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, "agent-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := runtime.CreateSpec{Task: "task/1", Container: event.ContainerSpec{Name: "app", Image: "img"}}
	s.state.Containers["foreign-1"] = &container{ID: "foreign-1", Agent: "agent-b", Task: "task/x", Container: "y", Name: runtime.Name("agent-a", "task/1", "app")}
	if _, err := s.Create(ctx, spec); !errors.Is(err, runtime.ErrNameTaken) || !strings.Contains(err.Error(), "foreign-1") {
		t.Fatalf("create under a name another agent's container holds: %v; want docker.ErrNameTaken naming foreign-1", err)
	}
	delete(s.state.Containers, "foreign-1")
	id, err := s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.Create(ctx, spec); err != nil || again != id {
		t.Fatalf("create again: %q, %v; want the same container %s", again, err, id)
	}
	s.state.Containers["old-1"] = &container{ID: "old-1", Agent: "agent-a", Task: "task/old", Container: "app", Name: "agentd-old-app-0badc0de"} // a name of the scheme before, without the agent id
	if st, err := s.Find(ctx, "task/old", "app"); err != nil || st.ID != "old-1" {
		t.Fatalf("find a container made under the old name: %+v, %v", st, err)
	}
}

// cat prints a file on Docker; the simulation has no files and exits 0, like Docker would
// with the file there.
func TestSimCatExitsZero(t *testing.T) {
	c := &clock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	s, err := Open(t.TempDir(), "agent-1", c.Now)
	if err != nil {
		t.Fatal(err)
	}
	id := run(t, s, "task/cat", "cat", "/data/f")
	if st, err := s.Inspect(context.Background(), id); err != nil || st.Running || !st.Exited || st.ExitCode != 0 {
		t.Fatalf("cat: %+v %v; want exited 0", st, err)
	}
}

// The simulated clock stands still between a simulation's steps, so two containers can end in
// the same instant, the second after the stream gave the first: the stream gives the second
// too, and a stream resumed at that instant's cursor gives both (Runtime.Exits: at or after).
func TestSimExitStreamGivesEveryExitOfOneInstant(t *testing.T) {
	s, _ := newTestRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, second := run(t, s, "task/first"), run(t, s, "task/second")
	exits, err := s.Exits(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := func(exits <-chan runtime.Exit, want, why string) runtime.Exit {
		t.Helper()
		select {
		case x := <-exits:
			if x.ID != want {
				t.Fatalf("%s: the stream gave %+v; want %s's exit", why, x, want)
			}
			return x
		case <-ctx.Done():
			t.Fatalf("%s: no exit of %s within 10s", why, want)
			panic("unreachable")
		}
	}
	var at int64 // the instant's cursor
	for _, id := range []string{first, second} {
		if err := s.Stop(ctx, id, time.Second); err != nil {
			t.Fatal(err)
		}
		at = next(exits, id, "stopped in the same instant as the other").Cursor
	}
	resumed, err := s.Exits(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	next(resumed, first, "resumed at the instant")
	next(resumed, second, "resumed at the instant")
}
