package simruntime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// scanExitsAfter and scanVerdicts are the simulated runtime's answers as a scan of every
// container gives them: the index (index.go) must give the same.
func scanExitsAfter(s *Runtime, m runtime.ExitMark) (exits []runtime.Exit, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, c := range s.state.Containers {
		if c.Agent != s.agent {
			continue
		}
		after := func(x runtime.Exit) {
			if x.Cursor >= m.Cursor && !m.Taken(x) {
				exits = append(exits, x)
			}
		}
		for _, p := range c.Past {
			after(runtime.Exit{ID: c.ID, Task: c.Task, Container: c.Container, ExitCode: p.Code, At: p.At, Cursor: p.At.UnixNano()})
		}
		if at, code, ended := exitOf(c, now); ended {
			after(runtime.Exit{ID: c.ID, Task: c.Task, Container: c.Container, ExitCode: code, OOMKilled: c.OOM, At: at, Cursor: at.UnixNano()})
		} else if !c.EndsAt.IsZero() && (next.IsZero() || c.EndsAt.Before(next)) {
			next = c.EndsAt
		}
	}
	slices.SortStableFunc(exits, func(a, b runtime.Exit) int {
		return cmp.Or(cmp.Compare(a.Cursor, b.Cursor), strings.Compare(a.ID, b.ID))
	})
	return exits, next
}

func scanVerdicts(s *Runtime) []runtime.HealthChange {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []runtime.HealthChange
	for _, c := range s.state.Containers {
		if _, _, ended := exitOf(c, s.now()); ended || c.Agent != s.agent {
			continue
		}
		if h, since, _ := c.health(s.now()); h != event.HealthUnknown {
			out = append(out, runtime.HealthChange{ID: c.ID, Task: c.Task, Container: c.Container, Health: h, At: since})
		}
	}
	slices.SortFunc(out, func(a, b runtime.HealthChange) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Random histories of creates, starts (re-runs too), stops, removals, restarts of the runtime
// from its file and time passing, two agents sharing the file: after every step the index
// answers as the scan does — exits after every mark a stream reached, the next planned exit, health
// verdicts, and a create of a taken name (idempotent for the holder, refused for another).
func TestIndexAnswersAsAScanWould(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { indexHistory(t, seed) })
	}
}

func indexHistory(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	c := &clock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	open := func(agent string) *Runtime {
		s, err := Open(dir, agent, c.Now)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sims := []*Runtime{open("agent-a"), open("agent-b")}
	commands := [][]string{{"exit", "0"}, {"exit", "3"}, {"sleep", "2s", "4"}, {"sleep", "500ms"}, {"run"}, {"alloc", "64"}}
	var ids []string
	marks := []runtime.ExitMark{{}}
	for step := 0; step < 300; step++ {
		s := sims[rng.IntN(len(sims))]
		switch op := rng.IntN(10); {
		case op < 3:
			spec := event.ContainerSpec{Name: "app", Image: "img", Command: commands[rng.IntN(len(commands))], MemoryMiB: 32}
			if rng.IntN(4) == 0 {
				spec.HealthCheck = &event.HealthCheck{Command: []string{"CMD", "/testbox", "exit", "0"}, IntervalS: 1, Retries: 1}
			}
			task := fmt.Sprintf("task/%d", rng.IntN(12))
			id, err := s.Create(ctx, runtime.CreateSpec{Task: task, Container: spec})
			if err == nil {
				ids = append(ids, id)
				again, err := s.Create(ctx, runtime.CreateSpec{Task: task, Container: spec})
				if err != nil || again != id {
					t.Fatalf("step %d: create again of %s: %q, %v; want the same container", step, id, again, err)
				}
			} else if !errors.Is(err, runtime.ErrNameTaken) {
				t.Fatalf("step %d: create: %v", step, err)
			}
		case op < 5 && len(ids) > 0:
			id := ids[rng.IntN(len(ids))]
			if rng.IntN(3) == 0 {
				_ = s.StartUnguarded(ctx, id)
			} else {
				_ = s.Start(ctx, id)
			}
		case op < 6 && len(ids) > 0:
			_ = s.Stop(ctx, ids[rng.IntN(len(ids))], time.Second)
		case op < 7 && len(ids) > 0:
			_ = s.Remove(ctx, ids[rng.IntN(len(ids))])
		case op < 8:
			sims = []*Runtime{open("agent-a"), open("agent-b")} // a restart: the index is built anew
		default:
			c.add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
		for _, s := range sims {
			for _, m := range marks {
				got, gotNext := s.ExitsAfter(m)
				want, wantNext := scanExitsAfter(s, m)
				if !reflect.DeepEqual(got, want) || !gotNext.Equal(wantNext) {
					t.Fatalf("step %d, %s, mark %+v:\nindex %v next %v\nscan  %v next %v", step, s.agent, m, got, gotNext, want, wantNext)
				}
				if len(got) > 0 && len(marks) < 8 && rng.IntN(4) == 0 {
					for _, x := range got[:1+rng.IntN(len(got))] { // a stream's position: some exits taken
						m.Take(x)
					}
					marks = append(marks, m)
				}
			}
			if got, _ := s.Verdicts(); !reflect.DeepEqual(got, scanVerdicts(s)) {
				t.Fatalf("step %d, %s: verdicts %v, scan %v", step, s.agent, got, scanVerdicts(s))
			}
		}
	}
}
