package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// countingRuntime counts the engine's calls of the runtime, by name.
type countingRuntime struct {
	runtime.Runtime
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingRuntime) count(name string) {
	c.mu.Lock()
	c.calls[name]++
	c.mu.Unlock()
}

func (c *countingRuntime) PullImage(ctx context.Context, image, policy string) (runtime.PullOutcome, error) {
	c.count("pull")
	return c.Runtime.PullImage(ctx, image, policy)
}

func (c *countingRuntime) Create(ctx context.Context, spec runtime.CreateSpec) (string, error) {
	c.count("create")
	return c.Runtime.Create(ctx, spec)
}

func (c *countingRuntime) Start(ctx context.Context, id string) error {
	c.count("start")
	return c.Runtime.Start(ctx, id)
}

func (c *countingRuntime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	c.count("stop")
	return c.Runtime.Stop(ctx, id, timeout)
}

func (c *countingRuntime) Remove(ctx context.Context, id string) error {
	c.count("remove")
	return c.Runtime.Remove(ctx, id)
}

func (c *countingRuntime) Inspect(ctx context.Context, id string) (runtime.State, error) {
	c.count("inspect")
	return c.Runtime.Inspect(ctx, id)
}

func (c *countingRuntime) Find(ctx context.Context, task, name string) (runtime.State, error) {
	c.count("find")
	return c.Runtime.Find(ctx, task, name)
}

// A task without host ports costs the runtime what a bare create/start/wait/remove loop
// costs it: no inspect after its start (its exit comes from the exit stream, held until the
// RUNNING is journaled) — and still journals RUNNING, then STOPPED with the exit code. A task
// with host ports is asked once after its start, for the ports bound, which go with RUNNING.
func TestAStartIsInspectedOnlyForItsPorts(t *testing.T) {
	rt := &countingRuntime{calls: map[string]int{}}
	r := newRig(t, 0)
	r.wrap = func(inner runtime.Runtime) runtime.Runtime { rt.Runtime = inner; return rt }
	r.crash() // the engine again, now through the counter

	r.assign("task/plain", "RUNNING", ctr("app", "exit", "3"))
	r.advance(time.Second)
	if r.known("task/plain") != event.StatusCleaned {
		t.Fatalf("task without ports: %s, want CLEANED", r.known("task/plain"))
	}
	want := map[string]int{"pull": 1, "create": 1, "start": 1, "remove": 1}
	if !sameCalls(rt.calls, want) {
		t.Fatalf("runtime calls of a task without ports: %v, want %v (the bare loop's four)", rt.calls, want)
	}
	var seen []string
	for _, rec := range r.records("task/plain", event.TypeContainerTransitioned) {
		ct := rec.Event.(*event.ContainerTransitioned)
		seen = append(seen, string(ct.To))
		if ct.To == event.StatusStopped && (ct.ExitCode == nil || *ct.ExitCode != 3) {
			t.Fatalf("STOPPED without the exit code 3 the exit stream carried: %+v", ct)
		}
	}
	if len(seen) < 4 || seen[2] != string(event.StatusRunning) || seen[3] != string(event.StatusStopped) {
		t.Fatalf("container transitions %v: want PULLED, CREATED, RUNNING, STOPPED", seen)
	}

	// Killed by the kernel as it starts (over its memory limit): no inspect either, and the
	// exit stream's OOM kill still gives its STOPPED the OutOfMemory reason.
	clear(rt.calls)
	hog := ctr("hog", "alloc", "64")
	hog.MemoryMiB = 32
	r.assign("task/oom", "RUNNING", hog)
	r.advance(time.Second)
	if rt.calls["inspect"] != 0 {
		t.Fatalf("runtime calls of an OOM-killed task without ports: %v, want no inspect", rt.calls)
	}
	oom := false
	for _, rec := range r.records("task/oom", event.TypeContainerTransitioned) {
		ct := rec.Event.(*event.ContainerTransitioned)
		oom = oom || (ct.To == event.StatusStopped && ct.Reason == event.OutOfMemoryReason)
	}
	if !oom {
		t.Fatal("a container OOM-killed at its start: no STOPPED with the OutOfMemory reason")
	}

	clear(rt.calls)
	web := ctr("web", "serve", "8080")
	web.Ports = []event.PortMapping{{ContainerPort: 8080}}
	r.assign("task/ports", "RUNNING", web)
	r.advance(time.Second)
	if rt.calls["inspect"] != 1 {
		t.Fatalf("runtime calls of a task with a host port: %v, want one inspect after the start", rt.calls)
	}
	running := r.records("task/ports", event.TypeContainerTransitioned)
	var bound []event.NetworkBinding
	for _, rec := range running {
		if ct := rec.Event.(*event.ContainerTransitioned); ct.To == event.StatusRunning {
			bound = ct.NetworkBindings
		}
	}
	if len(bound) != 1 || bound[0].ContainerPort != 8080 || bound[0].HostPort == 0 {
		t.Fatalf("RUNNING of a container with a host port carries %+v, want its binding", bound)
	}
}

func sameCalls(got, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, n := range want {
		if got[k] != n {
			return false
		}
	}
	return true
}

// flakyCreates is a runtime whose creates fail while fails says so, and whose first start
// finds its container gone (a create Docker rolled back); it notes when each create came.
type flakyCreates struct {
	runtime.Runtime
	now     func() time.Time
	fails   func(create int) bool
	creates []time.Time
	vanish  bool
}

func (f *flakyCreates) Create(ctx context.Context, spec runtime.CreateSpec) (string, error) {
	f.creates = append(f.creates, f.now())
	if f.fails(len(f.creates)) {
		return "", fmt.Errorf("create: %w", runtime.ErrUnavailable)
	}
	return f.Runtime.Create(ctx, spec)
}

func (f *flakyCreates) Start(ctx context.Context, id string) error {
	if !f.vanish {
		f.vanish = true
		if err := f.Runtime.Remove(ctx, id); err != nil {
			return err
		}
		return fmt.Errorf("start: %w", runtime.ErrNotFound)
	}
	return f.Runtime.Start(ctx, id)
}

// A call's backoff ends with its success (calls.succeeded): a create that failed twice, then
// went through, then failed again once rolled back and made anew, is retried after the first
// backoff (200ms, jittered up by half), not after a third (at least 400ms).
func TestACallsBackoffEndsWithItsSuccess(t *testing.T) {
	rt := &flakyCreates{fails: func(n int) bool { return n <= 2 || n == 4 }}
	r := newRig(t, time.Hour)
	rt.now = r.clock.Now
	r.wrap = func(inner runtime.Runtime) runtime.Runtime { rt.Runtime = inner; return rt }
	r.crash() // the engine again, now through the flaky runtime

	r.assign("task/flaky", "RUNNING", ctr("app", "sleep", "1h"))
	r.advance(10 * time.Second)
	if len(rt.creates) != 5 {
		t.Fatalf("%d creates; want 5: two failed, one rolled back, one failed, one made", len(rt.creates))
	}
	if r.task("task/flaky") == nil || r.task("task/flaky").Container("app").Known != event.StatusRunning {
		t.Fatalf("the task is not RUNNING after its create went through: %+v", r.task("task/flaky"))
	}
	if wait := rt.creates[4].Sub(rt.creates[3]); wait > 300*time.Millisecond {
		t.Fatalf("a create that failed after one that succeeded is retried %v later (creates at %v); want the first backoff, at most 300ms", wait, rt.creates)
	}
}
