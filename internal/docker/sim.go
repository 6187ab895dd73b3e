package docker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sim is the simulated runtime. Its containers live on the wall clock and in a file of their
// own beside the journal, so that, like Docker's, they keep running while the agent is down.
// A container's command says what it does (DESIGN.md, "Runtimes"):
//
//	[] or ["run"]          runs until stopped; a stop ends it with exit code 143
//	["sleep", "2s"]        runs 2 s, then exits 0
//	["sleep", "2s", "3"]   runs 2 s, then exits 3
//	["exit", "3"]          exits 3 at once
//
// and the words of PROTOCOL.md §4's workloads, as Docker would decide them
// (sim_workloads.go): `serve PORT`, `spew KIB` and `alloc MIB` run until stopped, but an
// alloc at or over the container's memory_mib is OOM-killed as it starts (137, OOMKilled);
// `linger D` exits 0 when its stop timeout exceeds D, else is killed (137); `write PATH TEXT`
// and `probe PORT` exit 0. Host ports are assigned at create (0: the lowest free from 32768).
// A health check passes when its words (after "CMD" and a program named testbox) exit 0 at
// once or are probe: HEALTHY after one interval; else UNHEALTHY after retries intervals.
//
// An image whose name contains fail-pull, fail-create or fail-start fails that step. Images
// and their registries are modelled in sim_images.go.
//
// Where the engine's correctness depends on it, Sim behaves like Docker, sharp edges included:
// Docker's start of an exited container runs it again (the tests' StartUnguarded; Start
// applies the same guard as the Docker runtime and refuses with ErrAlreadyStarted); a stop of
// a container that has not started yet does nothing, so a start that lands after it runs the
// container; and, with SetFaults, a call can be slow, time out, and still have taken effect.
type Sim struct {
	path   string
	agent  string
	now    func() time.Time
	faults func(op, id string) SimFault
	reg    simRegistry // sim_images.go
	binds  *BindRoots  // bind sources are resolved beneath these (nil: no bind mounts)

	mu      sync.Mutex
	state   simFile
	ops     int           // lines in the file after its state line
	idx     *simIndex     // derived from state (sim_index.go); nil: built when next needed
	changed chan struct{} // closed and replaced on every change, for Exits
}

type simFile struct {
	Next       int64                    `json:"next"`
	Containers map[string]*simContainer `json:"containers"`
	Images     map[string]*simImage     `json:"images,omitempty"` // by normalized reference
}

type simContainer struct {
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
	simWorkload
	Runs int       `json:"runs,omitempty"` // times started: more than 1 is a second incarnation
	Past []simExit `json:"past,omitempty"` // the exits of the runs before the current one
}

// simExit is how an earlier run of a container ended.
type simExit struct {
	At   time.Time `json:"at"`
	Code int       `json:"code"`
}

// SimFault is what SetFaults makes of one call.
type SimFault struct {
	// Delay is how long the call takes after it took effect (on the wall clock, cut short by
	// the caller's context — which then makes it an error, though the effect stands).
	Delay time.Duration
	// Err is returned after the call took effect: a timeout or a broken connection whose
	// request the engine still carried out.
	Err error
	// NoEffect fails the call before it takes effect (with Err, or a generic error).
	NoEffect bool
}

// SetFaults makes every later call (op is create, start, stop, remove or list) behave as f says.
// nil turns faults off.
func (s *Sim) SetFaults(f func(op, id string) SimFault) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// withFault runs effect (which takes the lock itself) as the faults say for op on id.
func (s *Sim) withFault(ctx context.Context, op, id string, effect func() error) error {
	s.mu.Lock()
	faults := s.faults
	s.mu.Unlock()
	var f SimFault
	if faults != nil {
		f = faults(op, id)
	}
	if f.NoEffect {
		if f.Err == nil {
			f.Err = fmt.Errorf("simulated failure before it took effect")
		}
		return fmt.Errorf("%s %s: %w", op, id, f.Err)
	}
	if err := effect(); err != nil {
		return err
	}
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%s %s: %w (the call took effect)", op, id, ctx.Err())
		}
	}
	if f.Err != nil {
		return fmt.Errorf("%s %s: %w (the call took effect)", op, id, f.Err)
	}
	return nil
}

// SimFileName is the simulated runtime's file inside a data directory.
const SimFileName = "sim-runtime.json"

// NewSim opens (or creates) the simulated runtime kept in dir for agent. now is its clock
// (time.Now in the daemon; a virtual clock in tests).
func NewSim(dir, agent string, now func() time.Time) (*Sim, error) {
	if now == nil {
		now = time.Now
	}
	s := &Sim{path: filepath.Join(dir, SimFileName), agent: agent, now: now, changed: make(chan struct{})}
	state, ops, err := readSimFile(s.path)
	if err != nil {
		return nil, err
	}
	s.state, s.ops = state, ops
	return s, nil
}

// simOp is one line after the first: a container written or removed.
type simOp struct {
	Put      *simContainer `json:"put,omitempty"`
	Del      string        `json:"del,omitempty"`
	Next     int64         `json:"next,omitempty"`
	PutImage *simImage     `json:"put_image,omitempty"`
	DelImage string        `json:"del_image,omitempty"`
}

// readSimFile reads the state line and replays the operation lines after it. A last line cut
// short by a crash mid-write is ignored: it was never acknowledged to anyone.
func readSimFile(path string) (simFile, int, error) {
	state := simFile{Containers: map[string]*simContainer{}}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return state, 0, nil
	}
	if err != nil {
		return state, 0, fmt.Errorf("sim runtime: open %s: %w", path, err)
	}
	lines := bytes.Split(b, []byte("\n"))
	ops := 0
	for i, l := range lines {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if i == 0 {
			if err := json.Unmarshal(l, &state); err != nil {
				return state, 0, fmt.Errorf("sim runtime: read %s: line 1: %w", path, err)
			}
			if state.Containers == nil {
				state.Containers = map[string]*simContainer{}
			}
			continue
		}
		var op simOp
		if err := json.Unmarshal(l, &op); err != nil {
			if i == len(lines)-1 || (i == len(lines)-2 && len(bytes.TrimSpace(lines[len(lines)-1])) == 0) {
				break // torn last line
			}
			return state, 0, fmt.Errorf("sim runtime: read %s: line %d: %w", path, i+1, err)
		}
		ops++
		switch {
		case op.Put != nil:
			state.Containers[op.Put.ID] = op.Put
		case op.Del != "":
			delete(state.Containers, op.Del)
		case op.PutImage != nil:
			if state.Images == nil {
				state.Images = map[string]*simImage{}
			}
			state.Images[op.PutImage.Ref] = op.PutImage
		case op.DelImage != "":
			delete(state.Images, op.DelImage)
		}
		state.Next = max(state.Next, op.Next)
	}
	return state, ops, nil
}

// SimStats reads a simulated runtime's file: how many containers it ever created and how
// many it holds now (for tests proving nothing was created twice).
func SimStats(dir string) (created int64, live int, err error) {
	st, _, err := readSimFile(filepath.Join(dir, SimFileName))
	return st.Next, len(st.Containers), err
}

func (s *Sim) Name() string { return "sim" }

// SetBindRoots gives the simulated runtime the roots bind sources are resolved beneath (nil:
// no bind mount is allowed). It refuses what the Docker runtime refuses, by the same rule
// (BindRoots.Open), and mounts nothing. Call it before the first Create.
func (s *Sim) SetBindRoots(r *BindRoots) { s.binds = r }

// save appends one operation line; once the lines outnumber the containers by far, it
// rewrites the file as one state line (temp file + rename: a crash leaves the old or the new).
// Appending keeps each change O(1) however many containers live.
func (s *Sim) save(op simOp) error {
	defer func() {
		close(s.changed)
		s.changed = make(chan struct{})
	}()
	if s.ops > 2*(len(s.state.Containers)+len(s.state.Images))+256 || s.ops == 0 {
		b, err := json.Marshal(s.state)
		if err != nil {
			return err
		}
		tmp := s.path + ".tmp"
		if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
			return fmt.Errorf("sim runtime: write %s: %w", tmp, err)
		}
		if err := os.Rename(tmp, s.path); err != nil {
			return fmt.Errorf("sim runtime: write %s: %w", s.path, err)
		}
		s.ops = 1
		return nil
	}
	b, err := json.Marshal(op)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(s.path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sim runtime: write %s: %w", s.path, err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sim runtime: write %s: %w", s.path, err)
	}
	s.ops++
	return nil
}

func failsAt(image, step string) error {
	if strings.Contains(image, "fail-"+step) {
		return fmt.Errorf("%s %s: simulated failure (image name contains fail-%s)", step, image, step)
	}
	return nil
}

// Pull pulls the image when the simulated engine lacks it (PullImage, if-not-present).
func (s *Sim) Pull(ctx context.Context, image string) error {
	_, err := s.PullImage(ctx, image, "if-not-present")
	return err
}

func (s *Sim) Create(ctx context.Context, spec CreateSpec) (string, error) {
	if err := failsAt(spec.Container.Image, "create"); err != nil {
		return "", err
	}
	name := Name(s.agent, spec.Task, spec.Container.Name)
	if err := checkBindSources(s.binds, spec.Container.Mounts); err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	var id string
	err := s.withFault(ctx, "create", name, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		// At most one container holds a name: looked up, not scanned for (sim_index.go).
		if c, ok := s.state.Containers[s.index().byName[name]]; ok {
			if c.Agent == s.agent && c.Task == spec.Task && c.Container == spec.Container.Name {
				id = c.ID
				return nil // idempotent: a crash between create and journaling the id
			}
			// as Docker: the name is another's
			return fmt.Errorf("create %s: %w: container %s holds it, not this agent's: made by agent %q", name, ErrNameTaken, c.ID, c.Agent)
		}
		s.state.Next++
		c := &simContainer{ID: "sim-" + strconv.FormatInt(s.state.Next, 10), Agent: s.agent, Task: spec.Task,
			Container: spec.Container.Name, Name: name, Image: spec.Container.Image, ImageID: cmp.Or(spec.ImageID, s.imageIDOf(spec.Container.Image)),
			Command: spec.Container.Command}
		if err := s.workload(c, spec.Container); err != nil {
			s.state.Next--
			return fmt.Errorf("create %s: %w", name, err)
		}
		s.state.Containers[c.ID] = c
		s.index().put(c)
		id = c.ID
		return s.save(simOp{Put: c, Next: s.state.Next})
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
// ErrAlreadyStarted.
func (s *Sim) Start(ctx context.Context, id string) error { return s.start(ctx, id, true) }

func (s *Sim) start(ctx context.Context, id string, guarded bool) error {
	return s.withFault(ctx, "start", id, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		c, ok := s.state.Containers[id]
		if !ok || c.Agent != s.agent {
			return fmt.Errorf("start %s: %w", id, ErrNotFound)
		}
		if err := failsAt(c.Image, "start"); err != nil {
			return err
		}
		now := s.now().UTC()
		st := s.stateOf(c, now)
		if guarded {
			if running, err := checkStart(st); err != nil || running {
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
			c.Past = append(c.Past, simExit{At: st.FinishedAt, Code: st.ExitCode})
			c.StoppedAt, c.StopCode, c.EndsAt, c.EndCode = time.Time{}, 0, time.Time{}, 0
		}
		c.StartedAt = now
		c.Runs++
		if !forever {
			c.EndsAt, c.EndCode = c.StartedAt.Add(d), code
		}
		s.index().put(c)
		return s.save(simOp{Put: c})
	})
}

// Reruns lists the containers that were started more than once (a second incarnation): a
// test's proof that nothing ran twice.
func (s *Sim) Reruns() []string {
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
func exitOf(c *simContainer, now time.Time) (at time.Time, code int, ended bool) {
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
func (s *Sim) Stop(ctx context.Context, id string, timeout time.Duration) error {
	return s.withFault(ctx, "stop", id, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		c, ok := s.state.Containers[id]
		if !ok || c.Agent != s.agent {
			return fmt.Errorf("stop %s: %w", id, ErrNotFound)
		}
		now := s.now().UTC()
		if _, _, ended := exitOf(c, now); ended || c.StartedAt.IsZero() {
			return nil
		}
		c.StoppedAt, c.StopCode = now, c.stopCode(timeout)
		s.index().put(c)
		return s.save(simOp{Put: c})
	})
}

func (s *Sim) Remove(ctx context.Context, id string) error {
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
		return s.save(simOp{Del: id})
	})
}

func (s *Sim) stateOf(c *simContainer, now time.Time) State {
	st := State{ID: c.ID, Task: c.Task, Container: c.Container, StartedAt: c.StartedAt}
	if at, code, ended := exitOf(c, now); ended {
		st.Exited, st.ExitCode, st.FinishedAt, st.OOMKilled = true, code, at, c.OOM
	} else if !c.StartedAt.IsZero() {
		st.Running = true
		st.Health, _, _ = c.health(now)
		st.Bindings = slices.Clone(c.Bindings)
	}
	return st
}

func (s *Sim) Inspect(ctx context.Context, id string) (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.state.Containers[id]
	if !ok || c.Agent != s.agent {
		return State{}, fmt.Errorf("inspect %s: %w", id, ErrNotFound)
	}
	return s.stateOf(c, s.now()), nil
}

func (s *Sim) Find(ctx context.Context, task, container string) (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.state.Containers {
		// By its labels, as the Docker runtime finds it: a container made under the name an
		// older agent gave it is still found.
		if c.Agent == s.agent && c.Task == task && c.Container == container {
			return s.stateOf(c, s.now()), nil
		}
	}
	return State{}, fmt.Errorf("find %s: %w", Name(s.agent, task, container), ErrNotFound)
}

func (s *Sim) List(ctx context.Context) ([]State, error) {
	var out []State
	err := s.withFault(ctx, "list", "", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		now := s.now()
		for _, c := range s.state.Containers {
			if c.Agent == s.agent {
				out = append(out, s.stateOf(c, now))
			}
		}
		slices.SortFunc(out, func(a, b State) int { return strings.Compare(a.ID, b.ID) })
		return nil
	})
	return out, err
}

// ExitsAfter returns the exits whose time (in unix nanoseconds, the cursor) is after cursor,
// in order, and when the next planned exit is due (zero: none planned). It reads the index's
// times after cursor (sim_index.go), not every container.
func (s *Sim) ExitsAfter(cursor int64) (exits []Exit, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	refs := s.index().exits
	i, _ := slices.BinarySearchFunc(refs, cursor, func(r simExitRef, cursor int64) int {
		return cmp.Compare(r.at.UnixNano(), cursor+1)
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
		exits = append(exits, exitsAt(c, r.at, now)...)
	}
	return exits, next
}

// Exits streams exits after cursor. It wakes at the next planned exit or at the next change,
// never polls.
func (s *Sim) Exits(ctx context.Context, cursor int64) (<-chan Exit, error) {
	out := make(chan Exit, 64)
	go func() {
		defer close(out)
		for {
			s.mu.Lock()
			changed := s.changed
			s.mu.Unlock()
			due, next := s.ExitsAfter(cursor)
			for _, e := range due {
				select {
				case out <- e:
					cursor = max(cursor, e.Cursor)
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
func (s *Sim) await(ctx context.Context, changed <-chan struct{}, next time.Time) bool {
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
func (s *Sim) Created() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Next
}

func (s *Sim) Close() error { return nil }
