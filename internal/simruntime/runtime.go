package simruntime

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/bindroot"
	"github.com/agentd/agentd/internal/runtime"
)

// Runtime is the simulated runtime: one agent's view of a simulated engine kept in a file
// (store.go). Its containers' lives are computed from their commands and the clock, so every
// call and every stream answers from the file's state and now alone.
type Runtime struct {
	path   string
	agent  string
	now    func() time.Time
	faults func(op, id string) Fault
	reg    registries      // images.go
	binds  *bindroot.Roots // bind sources are resolved beneath these (nil: no bind mounts)

	mu      sync.Mutex
	state   fileState
	ops     int           // lines in the file after its state line
	idx     *index        // derived from state (index.go); nil: built when next needed
	changed chan struct{} // closed and replaced on every change, for Exits
}

// The simulated runtime answers everything the Docker runtime does.
var _ runtime.Runtime = (*Runtime)(nil)

// Open opens (or creates) the simulated runtime kept in dir for agent. now is its clock
// (time.Now in the daemon; a virtual clock in tests).
func Open(dir, agent string, now func() time.Time) (*Runtime, error) {
	if now == nil {
		now = time.Now
	}
	s := &Runtime{path: filepath.Join(dir, FileName), agent: agent, now: now, changed: make(chan struct{})}
	state, ops, err := readFile(s.path)
	if err != nil {
		return nil, err
	}
	s.state, s.ops = state, ops
	return s, nil
}

// container is one container of the simulated engine, of any agent, as the file keeps it.
type container struct {
	ID        string    `json:"id"`
	Agent     string    `json:"agent"`
	Task      string    `json:"task"`
	Container string    `json:"container"`
	Name      string    `json:"name"`
	Image     string    `json:"image"`
	ImageID   string    `json:"image_id,omitempty"` // the image it was created from, when present
	Command   []string  `json:"command,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndsAt    time.Time `json:"ends_at,omitzero"` // when it will exit by itself (zero: never)
	EndCode   int       `json:"end_code"`
	StoppedAt time.Time `json:"stopped_at,omitzero"`
	StopCode  int       `json:"stop_code"`
	workload
	Runs int        `json:"runs,omitempty"` // times started: more than 1 is a second incarnation
	Past []pastExit `json:"past,omitempty"` // the exits of the runs before the current one
}

// pastExit is how an earlier run of a container ended.
type pastExit struct {
	At   time.Time `json:"at"`
	Code int       `json:"code"`
}

func (s *Runtime) Name() string { return "sim" }

// SetBindRoots gives the simulated runtime the roots bind sources are resolved beneath (nil:
// no bind mount is allowed). It refuses what the Docker runtime refuses, by the same rule
// (bindroot.Roots.Open), and mounts nothing. Call it before the first Create.
func (s *Runtime) SetBindRoots(r *bindroot.Roots) { s.binds = r }

func (s *Runtime) Create(ctx context.Context, spec runtime.CreateSpec) (string, error) {
	if err := failsAt(spec.Container.Image, "create"); err != nil {
		return "", err
	}
	name := runtime.Name(s.agent, spec.Task, spec.Container.Name)
	if err := s.binds.CheckSources(spec.Container.Mounts); err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	var id string
	err := s.withFault(ctx, "create", name, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		// At most one container holds a name: looked up, not scanned for (index.go).
		if c, ok := s.state.Containers[s.index().byName[name]]; ok {
			if c.Agent == s.agent && c.Task == spec.Task && c.Container == spec.Container.Name {
				id = c.ID
				return nil // idempotent: a crash between create and journaling the id
			}
			// as Docker: the name is another's
			return fmt.Errorf("create %s: %w: container %s holds it, not this agent's: made by agent %q", name, runtime.ErrNameTaken, c.ID, c.Agent)
		}
		s.state.Next++
		c := &container{ID: "sim-" + strconv.FormatInt(s.state.Next, 10), Agent: s.agent, Task: spec.Task,
			Container: spec.Container.Name, Name: name, Image: spec.Container.Image, ImageID: cmp.Or(spec.ImageID, s.imageIDOf(spec.Container.Image)),
			Command: spec.Container.Command}
		if err := s.setWorkload(c, spec.Container); err != nil {
			s.state.Next--
			return fmt.Errorf("create %s: %w", name, err)
		}
		s.state.Containers[c.ID] = c
		s.index().put(c)
		id = c.ID
		return s.save(fileOp{Put: c, Next: s.state.Next})
	})
	return id, err
}

// plan reads a command into how long the container runs and how it ends.
func plan(cmd []string) (d time.Duration, code int, forever bool, err error) {
	if len(cmd) == 0 || cmd[0] == "run" {
		return 0, 0, true, nil
	}
	switch cmd[0] {
	case "sleep":
		if len(cmd) < 2 || len(cmd) > 3 {
			return 0, 0, false, fmt.Errorf("sleep wants a duration and an optional exit code")
		}
		if d, err = time.ParseDuration(cmd[1]); err != nil {
			return 0, 0, false, fmt.Errorf("sleep %q: %w", cmd[1], err)
		}
		if len(cmd) == 3 {
			if code, err = strconv.Atoi(cmd[2]); err != nil {
				return 0, 0, false, fmt.Errorf("sleep exit code %q: %w", cmd[2], err)
			}
		}
		return d, code, false, nil
	case "exit":
		if len(cmd) != 2 {
			return 0, 0, false, fmt.Errorf("exit wants a code")
		}
		code, err = strconv.Atoi(cmd[1])
		return 0, code, false, err
	}
	return planWorkload(cmd)
}

// Start starts a container that never ran, under the same guard as the Docker runtime: a
// running container is left as it is, one that has run and stopped is refused with
// runtime.ErrAlreadyStarted.
func (s *Runtime) Start(ctx context.Context, id string) error { return s.start(ctx, id, true) }

// NeverStarted is a no-op: the simulated runtime holds nothing for a start (the Docker
// runtime holds its bind sources' descriptors).
func (s *Runtime) NeverStarted(string) {}

func (s *Runtime) start(ctx context.Context, id string, guarded bool) error {
	return s.withFault(ctx, "start", id, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		c, ok := s.state.Containers[id]
		if !ok || c.Agent != s.agent {
			return fmt.Errorf("start %s: %w", id, runtime.ErrNotFound)
		}
		if err := failsAt(c.Image, "start"); err != nil {
			return err
		}
		now := s.now().UTC()
		st := s.stateOf(c, now)
		if guarded {
			if running, err := runtime.CheckStart(st); err != nil || running {
				return err
			}
		} else if st.Running {
			return nil // Docker: starting a running container changes nothing
		}
		d, code, forever, err := plan(c.Command)
		if err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
		if st.Exited {
			// Docker runs it again: the earlier run's exit stays in the event stream.
			c.Past = append(c.Past, pastExit{At: st.FinishedAt, Code: st.ExitCode})
			c.StoppedAt, c.StopCode, c.EndsAt, c.EndCode = time.Time{}, 0, time.Time{}, 0
		}
		c.StartedAt = now
		c.Runs++
		if !forever {
			c.EndsAt, c.EndCode = c.StartedAt.Add(d), code
		}
		s.index().put(c)
		return s.save(fileOp{Put: c})
	})
}

// Reruns lists the containers that were started more than once (a second incarnation): a
// test's proof that nothing ran twice.
func (s *Runtime) Reruns() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, c := range s.state.Containers {
		if c.Runs > 1 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// exitOf says whether and how a container has ended at now.
func exitOf(c *container, now time.Time) (at time.Time, code int, ended bool) {
	switch {
	case c.StartedAt.IsZero():
		return time.Time{}, 0, false
	case c.OOM:
		return c.StartedAt, 137, true // killed by the kernel as it allocates, before any stop
	case !c.StoppedAt.IsZero() && (c.EndsAt.IsZero() || c.StoppedAt.Before(c.EndsAt)):
		return c.StoppedAt, c.StopCode, true
	case !c.EndsAt.IsZero() && !now.Before(c.EndsAt):
		return c.EndsAt, c.EndCode, true
	}
	return time.Time{}, 0, false
}

// Stop ends a running container with 143. Like Docker's, a stop of a container that never
// started does nothing: a start that lands after it (one that was in flight) runs the
// container.
func (s *Runtime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	return s.withFault(ctx, "stop", id, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		c, ok := s.state.Containers[id]
		if !ok || c.Agent != s.agent {
			return fmt.Errorf("stop %s: %w", id, runtime.ErrNotFound)
		}
		now := s.now().UTC()
		if _, _, ended := exitOf(c, now); ended || c.StartedAt.IsZero() {
			return nil
		}
		c.StoppedAt, c.StopCode = now, c.stopCode(timeout)
		s.index().put(c)
		return s.save(fileOp{Put: c})
	})
}

func (s *Runtime) Remove(ctx context.Context, id string) error {
	return s.withFault(ctx, "remove", id, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		c, ok := s.state.Containers[id]
		if !ok {
			return nil
		}
		if c.Agent != s.agent {
			return fmt.Errorf("remove %s: belongs to agent %q, not %q", id, c.Agent, s.agent)
		}
		s.index().del(c)
		delete(s.state.Containers, id)
		return s.save(fileOp{Del: id})
	})
}

// RemoveUnlessStarted removes the container unless it has started — runs, or ran and
// exited (ErrRunning), as Docker's fence sees from its inspect; gone is ErrNotFound.
func (s *Runtime) RemoveUnlessStarted(ctx context.Context, id string) error {
	return s.withFault(ctx, "remove", id, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		c, ok := s.state.Containers[id]
		if !ok || c.Agent != s.agent {
			return fmt.Errorf("remove %s: %w", id, runtime.ErrNotFound)
		}
		if !c.StartedAt.IsZero() {
			return fmt.Errorf("remove %s: %w", id, runtime.ErrRunning)
		}
		s.index().del(c)
		delete(s.state.Containers, id)
		return s.save(fileOp{Del: id})
	})
}

func (s *Runtime) stateOf(c *container, now time.Time) runtime.State {
	st := runtime.State{ID: c.ID, Task: c.Task, Container: c.Container, StartedAt: c.StartedAt}
	if at, code, ended := exitOf(c, now); ended {
		st.Exited, st.ExitCode, st.FinishedAt, st.OOMKilled = true, code, at, c.OOM
	} else if !c.StartedAt.IsZero() {
		st.Running = true
		st.Health, _, _ = c.health(now)
		st.Bindings = slices.Clone(c.Bindings)
	}
	return st
}

func (s *Runtime) Inspect(ctx context.Context, id string) (runtime.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.state.Containers[id]
	if !ok || c.Agent != s.agent {
		return runtime.State{}, fmt.Errorf("inspect %s: %w", id, runtime.ErrNotFound)
	}
	return s.stateOf(c, s.now()), nil
}

func (s *Runtime) Find(ctx context.Context, task, name string) (runtime.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.state.Containers {
		// By its labels, as the Docker runtime finds it: a container made under the name an
		// older agent gave it is still found.
		if c.Agent == s.agent && c.Task == task && c.Container == name {
			return s.stateOf(c, s.now()), nil
		}
	}
	return runtime.State{}, fmt.Errorf("find %s: %w", runtime.Name(s.agent, task, name), runtime.ErrNotFound)
}

func (s *Runtime) List(ctx context.Context) ([]runtime.State, error) {
	var out []runtime.State
	err := s.withFault(ctx, "list", "", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		now := s.now()
		for _, c := range s.state.Containers {
			if c.Agent == s.agent {
				out = append(out, s.stateOf(c, now))
			}
		}
		slices.SortFunc(out, func(a, b runtime.State) int { return strings.Compare(a.ID, b.ID) })
		return nil
	})
	return out, err
}

// ExitsAfter returns the exits after the mark — at its cursor (the time in unix nanoseconds)
// those it has not taken, then every later one — in order, and when the next planned exit is
// due (zero: none planned). It reads the index's times from the cursor on (index.go), not every
// container. The simulated clock stands still between steps, so two containers often end at
// the same instant, one of them after the other's exit was taken.
func (s *Runtime) ExitsAfter(m runtime.ExitMark) (exits []runtime.Exit, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	refs := s.index().exits
	i, _ := slices.BinarySearchFunc(refs, m.Cursor, func(r exitRef, cursor int64) int {
		return cmp.Compare(r.at.UnixNano(), cursor)
	})
	for ; i < len(refs); i++ {
		r := refs[i]
		c, ok := s.state.Containers[r.id]
		if !ok || c.Agent != s.agent {
			continue
		}
		if r.at.After(now) {
			// The first end still planned is the next: later ones come after it.
			if _, _, ended := exitOf(c, now); !ended && c.EndsAt.Equal(r.at) {
				next = r.at
				break
			}
			continue
		}
		for _, x := range exitsAt(c, r.at, now) {
			if !m.Taken(x) {
				exits = append(exits, x)
			}
		}
	}
	return exits, next
}

// Exits streams exits at or after cursor. It wakes at the next planned exit or at the next
// change, never polls.
func (s *Runtime) Exits(ctx context.Context, cursor int64) (<-chan runtime.Exit, error) {
	out := make(chan runtime.Exit, 64)
	go func() {
		defer close(out)
		mark := runtime.ExitMark{Cursor: cursor}
		for {
			s.mu.Lock()
			changed := s.changed
			s.mu.Unlock()
			due, next := s.ExitsAfter(mark)
			for _, e := range due {
				select {
				case out <- e:
					mark.Take(e)
				case <-ctx.Done():
					return
				}
			}
			if !s.await(ctx, changed, next) {
				return
			}
		}
	}()
	return out, nil
}

// await waits until the runtime's state changes, next comes (zero: no deadline) or ctx ends,
// and reports whether the stream goes on: the one wait of the streams, which never poll.
func (s *Runtime) await(ctx context.Context, changed <-chan struct{}, next time.Time) bool {
	var fire <-chan time.Time
	if !next.IsZero() {
		timer := time.NewTimer(max(next.Sub(s.now()), time.Millisecond))
		defer timer.Stop()
		fire = timer.C
	}
	select {
	case <-ctx.Done():
	case <-changed:
	case <-fire:
	}
	return ctx.Err() == nil
}

// Created counts the containers ever created (ids are never reused): a test's proof that
// nothing was created twice.
func (s *Runtime) Created() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Next
}

func (s *Runtime) Close() error { return nil }
