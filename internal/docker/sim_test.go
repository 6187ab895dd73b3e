package docker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func run(t *testing.T, s *Sim, task string, cmd ...string) string {
	t.Helper()
	ctx := context.Background()
	id, err := s.Create(ctx, CreateSpec{Task: task, Container: event.ContainerSpec{Name: "app", Image: "img", Command: cmd}})
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
	s, err := NewSim(dir, "agent-1", c.Now)
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
	// Containers outlive the agent: a new Sim over the same file sees them.
	s2, _ := NewSim(dir, "agent-1", c.Now)
	if st, err := s2.Inspect(ctx, forever); err != nil || st.ExitCode != 143 {
		t.Fatalf("after reopen: %+v %v", st, err)
	}
	// Create is idempotent by task and container name.
	again, _ := s2.Create(ctx, CreateSpec{Task: "task/run", Container: event.ContainerSpec{Name: "app", Image: "img"}})
	if again != forever || s2.Created() != 4 {
		t.Fatalf("second create of the same container: %s (created %d); want %s, 4", again, s2.Created(), forever)
	}
	// Another agent's runtime sees none of it and may not touch it.
	other, _ := NewSim(dir, "agent-2", c.Now)
	if l, _ := other.List(ctx); len(l) != 0 {
		t.Fatalf("agent-2 lists %d containers of agent-1", len(l))
	}
	if err := other.Remove(ctx, forever); err == nil {
		t.Fatal("agent-2 removed agent-1's container")
	}
	if _, err := other.Inspect(ctx, forever); !errors.Is(err, ErrNotFound) {
		t.Fatalf("agent-2 inspects agent-1's container: %v", err)
	}
	exits, _ := s2.ExitsAfter(0)
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
	s, _ := NewSim(t.TempDir(), "a", nil)
	ctx := context.Background()
	if err := s.Pull(ctx, "x/fail-pull:1"); err == nil {
		t.Fatal("fail-pull pulled")
	}
	if _, err := s.Create(ctx, CreateSpec{Task: "t", Container: event.ContainerSpec{Name: "c", Image: "fail-create"}}); err == nil {
		t.Fatal("fail-create created")
	}
	id, _ := s.Create(ctx, CreateSpec{Task: "t", Container: event.ContainerSpec{Name: "c", Image: "fail-start"}})
	if err := s.Start(ctx, id); err == nil {
		t.Fatal("fail-start started")
	}
}

// TestNames: a container's name carries the agent id, the task's id and the container's name
// readably, stays within Docker's name rules whatever the ids hold, and keeps apart what the
// names before (a 32-bit FNV of the ARN) let collide: two ARNs whose FNV-1a agree, found here
// by a search of a fraction of a second, and one ARN on two agents sharing an engine.
func TestNames(t *testing.T) {
	dockerName := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)
	n := Name("agent-0123456789abcdef", "arn:aws:ecs:eu-west-1:1:task/7f3a", "app")
	if !strings.HasPrefix(n, "agentd-agent-0123456789abcdef-7f3a-app-") || !dockerName.MatchString(n) {
		t.Fatalf("name %q: want agentd-<agent id>-<task id>-<container>-<digest>", n)
	}
	if d := n[strings.LastIndex(n, "-")+1:]; len(d) < 16 {
		t.Fatalf("name %q: digest %q has fewer than 64 bits", n, d)
	}
	for _, ids := range [][2]string{{"agent é/x\x00", "task/ü ß"}, {"", ""}, {strings.Repeat("a", 300), strings.Repeat("t/", 300)}} {
		if n := Name(ids[0], ids[1], "c"); !dockerName.MatchString(n) || len(n) > 128 {
			t.Errorf("Name(%q, %q) = %q: not a Docker name of bounded length", ids[0], ids[1], n)
		}
	}

	a, b := fnvCollision(t, "cluster-%d/task1")
	if oldName(a, "app") != oldName(b, "app") {
		t.Fatalf("%q and %q: the names before were not the same (%s, %s)", a, b, oldName(a, "app"), oldName(b, "app"))
	}
	if Name("agent-1", a, "app") == Name("agent-1", b, "app") {
		t.Fatalf("%q and %q, whose FNV-1a collide, get one name: %s", a, b, Name("agent-1", a, "app"))
	}
	if Name("agent-old", a, "app") == Name("agent-new", a, "app") {
		t.Fatal("one ARN on two agents gets one name")
	}
	if Name("a", "b/c", "x") == Name("ab", "/c", "x") {
		t.Fatal("agent id and ARN are not kept apart in the digest")
	}
}

// oldName is the name agentd gave containers before names carried the agent id.
func oldName(task, container string) string {
	h := fnv.New32a()
	h.Write([]byte(task))
	return fmt.Sprintf("agentd-%s-%s-%08x", nameTail(task, "/:", 40), container, h.Sum32())
}

// fnvCollision finds two ARNs of the pattern (with %d) whose 32-bit FNV-1a agree.
func fnvCollision(t *testing.T, pattern string) (string, string) {
	seen := map[uint32]string{}
	for i := 0; i < 1<<22; i++ {
		arn := fmt.Sprintf(pattern, i)
		h := fnv.New32a()
		h.Write([]byte(arn))
		if other, ok := seen[h.Sum32()]; ok {
			return other, arn
		}
		seen[h.Sum32()] = arn
	}
	t.Fatal("no FNV-1a collision among 4M ARNs")
	return "", ""
}

// TestSimNameTakenByAnother: as on Docker, a name held by a container that is not this one —
// another agent's — fails the create with ErrNameTaken naming the holder; the agent's own
// container under the name is the create's answer (idempotent); and a container made under
// the name an older agent gave it is still found by its labels.
func TestSimNameTakenByAnother(t *testing.T) {
	dir := t.TempDir()
	s, err := NewSim(dir, "agent-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := CreateSpec{Task: "task/1", Container: event.ContainerSpec{Name: "app", Image: "img"}}
	s.state.Containers["foreign-1"] = &simContainer{ID: "foreign-1", Agent: "agent-b", Task: "task/x", Container: "y", Name: Name("agent-a", "task/1", "app")}
	if _, err := s.Create(ctx, spec); !errors.Is(err, ErrNameTaken) || !strings.Contains(err.Error(), "foreign-1") {
		t.Fatalf("create under a name another agent's container holds: %v; want ErrNameTaken naming foreign-1", err)
	}
	delete(s.state.Containers, "foreign-1")
	id, err := s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.Create(ctx, spec); err != nil || again != id {
		t.Fatalf("create again: %q, %v; want the same container %s", again, err, id)
	}
	s.state.Containers["old-1"] = &simContainer{ID: "old-1", Agent: "agent-a", Task: "task/old", Container: "app", Name: oldName("task/old", "app")}
	if st, err := s.Find(ctx, "task/old", "app"); err != nil || st.ID != "old-1" {
		t.Fatalf("find a container made under the old name: %+v, %v", st, err)
	}
}

// cat prints a file on Docker; the simulation has no files and exits 0, like Docker would
// with the file there.
func TestSimCatExitsZero(t *testing.T) {
	c := &clock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	s, err := NewSim(t.TempDir(), "agent-1", c.Now)
	if err != nil {
		t.Fatal(err)
	}
	id := run(t, s, "task/cat", "cat", "/data/f")
	if st, err := s.Inspect(context.Background(), id); err != nil || st.Running || !st.Exited || st.ExitCode != 0 {
		t.Fatalf("cat: %+v %v; want exited 0", st, err)
	}
}
