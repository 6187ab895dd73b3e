package docker

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/runtime"
)

// Issue 41, item 6, on the real engine: a bind source's descriptor is held from its container's
// create only until the engine has answered its start — started, or refused — and no more of
// them are open at once than the bound; a create past the bound waits for another container's
// start, and fails alone, naming the bound, when none comes.
func TestDockerBindDescriptorsAreHeldUntilTheStartAndBounded(t *testing.T) {
	r := newBindRig(t)
	ctx := context.Background()
	src := r.insideDir(t, "shared/held")
	r.e.bindBound = newBindBound(1, 200*time.Millisecond)
	spec := func(name string) runtime.CreateSpec { return catSpec(name, src) }

	a := mustCreate(t, r.e, spec("a"))
	r.heldOn(t, src, 1, "after a's create")

	// Past the bound, with nothing starting: the create fails alone, saying why.
	if _, err := r.e.Create(ctx, spec("past-bound")); err == nil || !strings.Contains(err.Error(), "all 1 of the bound on bind descriptors open at once") ||
		errors.Is(err, runtime.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("create past the bound: %v; want a failure of its own naming the bound", err)
	}
	if _, err := r.e.Find(ctx, "task/binds", "past-bound"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("the create past the bound left a container: %v", err)
	}

	// Past the bound while a's start comes: the create waits for it, then goes on.
	r.e.bindBound.wait = 2 * time.Minute
	made := make(chan error, 1)
	var b string
	go func() {
		var err error
		b, err = r.e.Create(ctx, spec("b"))
		made <- err
	}()
	if got := r.seen(t, a); got != "inside" {
		t.Fatalf("a saw %q", got)
	}
	must(t, <-made)
	r.heldOn(t, src, 1, "after b's create (a's descriptor let go at a's start)")
	if got := r.seen(t, b); got != "inside" {
		t.Fatalf("b saw %q", got)
	}

	// Started: the descriptor goes at the start, while the container runs on.
	long := spec("runs")
	long.Container.Command = nil
	runs := mustCreate(t, r.e, long)
	must(t, r.e.Start(ctx, runs))
	r.heldOn(t, src, 0, "after a start, the container running")
	if err := r.e.Start(ctx, runs); err != nil {
		t.Fatalf("a start again of the running container: %v", err)
	}
	must(t, r.e.Remove(ctx, runs))

	// A start the engine refuses (no such entrypoint): the descriptor goes too, and the
	// container is never started again.
	bad := spec("bad-start")
	bad.Container.Entrypoint = []string{"/no/such/program"}
	refused := mustCreate(t, r.e, bad)
	if err := r.e.Start(ctx, refused); err == nil {
		t.Fatal("the start of a container without its entrypoint succeeded")
	}
	r.heldOn(t, src, 0, "after a refused start")
	must(t, r.e.Remove(ctx, refused))

	// A create the engine refuses (under its 6 MB memory floor): nothing held, nothing left.
	small := spec("bad-create")
	small.Container.MemoryMiB = 1
	if _, err := r.e.Create(ctx, small); err == nil {
		t.Fatal("the create under the engine's memory floor succeeded")
	}
	r.heldOn(t, src, 0, "after a refused create")
	if left := agentVolumes(t, r.agent); len(left) > 0 {
		t.Fatalf("volumes left: %v", left)
	}
}

// heldOn checks how many of this process's descriptors name dir (as the kernel shows them),
// and that the bound counts as many taken.
func (r *bindRig) heldOn(t *testing.T, dir string, want int, when string) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && target == dir {
			n++
		}
	}
	taken := !r.e.bindBound.sem.TryAcquire(1)
	if !taken {
		r.e.bindBound.sem.Release(1)
	}
	if n != want || taken != (want == 1) {
		t.Fatalf("%s: %d descriptors of %s open, the bound of 1 taken: %v; want %d", when, n, dir, taken, want)
	}
}
