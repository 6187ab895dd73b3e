package runtimetest

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// subject is one test's runtime under test and the waits the tests share. Every wait is on
// the runtime's own events and bounded by wait.
type subject struct {
	t     *testing.T
	eng   Engine
	agent string
	rt    runtime.Runtime
	since int64 // the test's exits come after this cursor
}

func newSubject(t *testing.T, eng Engine) *subject {
	since := time.Now().Add(-time.Second).UnixNano()
	agent := agentID("mine")
	return &subject{t: t, eng: eng, agent: agent, rt: eng.Open(t, agent), since: since}
}

// spec is a container "app" of task running the test image with the words cmd.
func (s *subject) spec(task string, cmd ...string) runtime.CreateSpec {
	return runtime.CreateSpec{Task: task, Container: event.ContainerSpec{Name: "app", Image: s.eng.Image, Command: cmd}}
}

func (s *subject) create(spec runtime.CreateSpec) string {
	s.t.Helper()
	id, err := s.rt.Create(context.Background(), spec)
	if err != nil {
		s.t.Fatalf("create %s: %v", spec.Task, err)
	}
	return id
}

// start creates and starts the container of spec.
func (s *subject) start(spec runtime.CreateSpec) string {
	s.t.Helper()
	id := s.create(spec)
	if err := s.rt.Start(context.Background(), id); err != nil {
		s.t.Fatalf("start %s: %v", spec.Task, err)
	}
	return id
}

func (s *subject) inspect(id string) runtime.State {
	s.t.Helper()
	st, err := s.rt.Inspect(context.Background(), id)
	if err != nil {
		s.t.Fatalf("inspect %s: %v", id, err)
	}
	return st
}

// exit waits for the container's exit in the runtime's exit stream (subscribed from the
// test's start, so an exit that came before the wait is still seen).
func (s *subject) exit(id string) runtime.Exit {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return s.exitAfter(ctx, s.since, id)
}

func (s *subject) exitAfter(ctx context.Context, cursor int64, id string) runtime.Exit {
	s.t.Helper()
	exits, err := s.rt.Exits(ctx, cursor)
	if err != nil {
		s.t.Fatalf("exits: %v", err)
	}
	return s.exitIn(ctx, exits, id)
}

// exitIn waits for the container's exit in a subscribed exit stream.
func (s *subject) exitIn(ctx context.Context, exits <-chan runtime.Exit, id string) runtime.Exit {
	s.t.Helper()
	for {
		select {
		case x, ok := <-exits:
			if !ok {
				s.t.Fatalf("the exit stream ended before %s exited (%v)", id, ctx.Err())
			}
			if x.ID == id {
				return x
			}
		case <-ctx.Done():
			s.t.Fatalf("no exit of %s in %s", id, wait)
		}
	}
}

// logged waits until the container's log holds want, following it (a container's signal
// handlers are set once testbox has written its start line).
func (s *subject) logged(id, want string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	rc, err := s.rt.Logs(ctx, id, runtime.LogOptions{Tail: -1, Follow: true})
	if err != nil {
		s.t.Fatalf("logs %s: %v", id, err)
	}
	defer rc.Close()
	m := &matcher{want: want, found: make(chan struct{})}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = stdcopy.StdCopy(m, m, rc)
	}()
	select {
	case <-m.found:
	case <-copied:
		select {
		case <-m.found:
		default:
			s.t.Fatalf("%s's log ended without %q: %q", id, want, m.text())
		}
	case <-ctx.Done():
		s.t.Fatalf("%s did not write %q in %s: %q", id, want, wait, m.text())
	}
}

// matcher takes a log's text and closes found once it holds want.
type matcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	found chan struct{}
	done  bool
}

func (m *matcher) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buf.Write(p)
	if !m.done && strings.Contains(m.buf.String(), m.want) {
		m.done = true
		close(m.found)
	}
	return len(p), nil
}

func (m *matcher) text() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.buf.String()
}

// verdict waits for the container's health to turn want on the stream ch.
func (s *subject) verdict(ch <-chan runtime.HealthChange, id string, want event.Health) runtime.HealthChange {
	s.t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case h, ok := <-ch:
			if !ok {
				s.t.Fatalf("the health stream ended before %s turned %s", id, want)
			}
			if h.ID == id && h.Health == want {
				return h
			}
		case <-timeout:
			s.t.Fatalf("%s did not turn %s in %s", id, want, wait)
		}
	}
}
