package runtimetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// Create is idempotent by (task, container): a crash between a create and journaling its id
// never makes a second container. The container is found and listed by its labels, and has
// neither run nor exited before its start.
func createIsIdempotentAndFoundByLabels(t *testing.T, s *subject) {
	ctx := context.Background()
	id := s.create(s.spec("task/once", "run"))
	if again := s.create(s.spec("task/once", "run")); again != id {
		t.Fatalf("second create: %s; want the existing %s", again, id)
	}
	found, err := s.rt.Find(ctx, "task/once", "app")
	if err != nil || found.ID != id || found.Task != "task/once" || found.Container != "app" {
		t.Fatalf("find: %+v, %v; want %s with its labels", found, err, id)
	}
	if found.Running || found.Exited || !found.StartedAt.IsZero() {
		t.Fatalf("a container never started: %+v", found)
	}
	list, err := s.rt.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].Task != "task/once" || list[0].Container != "app" {
		t.Fatalf("list: %+v, %v; want only %s, with its labels", list, err, id)
	}
	if _, err := s.rt.Find(ctx, "task/once", "other"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("find of a container never made: %v; want ErrNotFound", err)
	}
}

// An exit reaches the exit stream with the container's labels, its code and a cursor, and an
// inspect says the same. A stream resumed at that cursor gives the exit again, then the later
// ones: it gives every exit at or after its cursor, since another container may have exited in
// the same nanosecond as the last exit the reader took (Docker's die times are the daemon's
// wall clock) and would otherwise never be given; the reader drops what it took already
// (runtime.ExitMark).
func exitCodesReachInspectAndTheExitStream(t *testing.T, s *subject) {
	// Subscribed before each start, so each exit comes live, with its own cursor: one that came
	// before the subscription would be sent by its catch-up, carrying the subscription's cursor
	// (exits.go), and raced the start on Podman, which catches up at every subscription.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	live, err := s.rt.Exits(ctx, s.since)
	if err != nil {
		t.Fatal(err)
	}
	first := s.start(s.spec("task/three", "exit", "3"))
	x := s.exitIn(ctx, live, first)
	if x.ExitCode != 3 || x.Task != "task/three" || x.Container != "app" || x.Cursor <= s.since || x.OOMKilled {
		t.Fatalf("exit event %+v; want code 3 with its labels and a cursor", x)
	}
	st := s.inspect(first)
	if st.Running || !st.Exited || st.ExitCode != 3 || st.StartedAt.IsZero() || st.FinishedAt.IsZero() {
		t.Fatalf("inspect after the exit: %+v", st)
	}
	exits, err := s.rt.Exits(ctx, x.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	second := s.start(s.spec("task/five", "exit", "5"))
	for _, want := range []struct {
		id   string
		code int
		why  string
	}{{first, 3, "the exit at the cursor"}, {second, 5, "the exit after it"}} {
		select {
		case y, ok := <-exits:
			if !ok || y.ID != want.id || y.ExitCode != want.code {
				t.Fatalf("the stream resumed at %s's exit gave %+v (open %v); want %s, %s's exit %d", first, y, ok, want.why, want.id, want.code)
			}
		case <-ctx.Done():
			t.Fatalf("the stream resumed at %s's exit did not give %s, %s's", first, want.why, want.id)
		}
	}
}

// A stop sends the container's stop signal and kills it after its own stop_timeout_s (else
// the caller's timeout): testbox obeys SIGTERM with 143, `linger D` exits 0 when D fits in
// the timeout and is killed (137) when it does not, SIGKILL kills at once. A stop of a
// container that has exited is no error.
func stopEndsAContainerAsItsSignalAndTimeoutSay(t *testing.T, s *subject) {
	sec := func(n int) *int { return &n }
	spec := func(task string, c event.ContainerSpec) runtime.CreateSpec {
		c.Name, c.Image = "app", s.eng.Image
		return runtime.CreateSpec{Task: task, Container: c}
	}
	for _, c := range []struct {
		spec    runtime.CreateSpec
		timeout time.Duration
		want    int
		why     string
	}{
		{spec("task/plain", event.ContainerSpec{Command: []string{"run"}}), 10 * time.Second, 143, "SIGTERM obeyed"},
		{spec("task/patient", event.ContainerSpec{Command: []string{"linger", "1s"}, StopTimeoutS: sec(30)}), time.Millisecond, 0, "stop_timeout_s 30 outlasts a 1 s linger, whatever the caller's timeout"},
		{spec("task/hasty", event.ContainerSpec{Command: []string{"linger", "30s"}, StopTimeoutS: sec(1)}), time.Minute, 137, "stop_timeout_s 1 kills a 30 s linger"},
		{spec("task/kill", event.ContainerSpec{Command: []string{"run"}, StopSignal: "SIGKILL", StopTimeoutS: sec(30)}), time.Minute, 137, "stop_signal SIGKILL"},
	} {
		id := s.start(c.spec)
		s.logged(id, "testbox:")
		if err := s.rt.Stop(context.Background(), id, c.timeout); err != nil {
			t.Fatalf("%s: stop: %v", c.why, err)
		}
		if x := s.exit(id); x.ExitCode != c.want {
			t.Fatalf("%s: exit %d; want %d", c.why, x.ExitCode, c.want)
		}
		if err := s.rt.Stop(context.Background(), id, time.Second); err != nil {
			t.Fatalf("%s: a stop after the exit: %v; want no error", c.why, err)
		}
	}
}

// A container that has run is never started again (ErrAlreadyStarted, naming its exit), and
// stays as it was; a start of a running container changes nothing (the same incarnation).
func aContainerThatRanIsNeverStartedAgain(t *testing.T, s *subject) {
	ctx := context.Background()
	id := s.start(s.spec("task/once", "exit", "3"))
	s.exit(id)
	before := s.inspect(id)
	err := s.rt.Start(ctx, id)
	if !errors.Is(err, runtime.ErrAlreadyStarted) || !strings.Contains(err.Error(), "exited 3") {
		t.Fatalf("second start: %v; want ErrAlreadyStarted naming the exit", err)
	}
	if after := s.inspect(id); after.Running || !after.StartedAt.Equal(before.StartedAt) || !after.FinishedAt.Equal(before.FinishedAt) {
		t.Fatalf("the refused start ran it again: before %+v, after %+v", before, after)
	}
	runner := s.start(s.spec("task/runs", "run"))
	first := s.inspect(runner)
	if err := s.rt.Start(ctx, runner); err != nil {
		t.Fatalf("start of a running container: %v", err)
	}
	if again := s.inspect(runner); !again.Running || !again.StartedAt.Equal(first.StartedAt) {
		t.Fatalf("start of a running container changed it: %+v → %+v", first, again)
	}
}

// A stop that lands before the start (it was decided while the start was out) finds nothing
// running and does nothing: the start after it runs the container. The engine must order
// the two itself; the runtime does not.
func aStopBeforeTheStartIsLost(t *testing.T, s *subject) {
	ctx := context.Background()
	id := s.create(s.spec("task/race", "run"))
	if err := s.rt.Stop(ctx, id, time.Second); err != nil {
		t.Fatalf("stop of a created container: %v", err)
	}
	if err := s.rt.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st := s.inspect(id); !st.Running {
		t.Fatalf("after stop, then start: %+v; want it running", st)
	}
}

// Remove takes a container, exited or running, and a removal of one already gone succeeds.
func removeTakesTheContainerAndAgainSucceeds(t *testing.T, s *subject) {
	ctx := context.Background()
	exited := s.start(s.spec("task/exited", "exit", "0"))
	s.exit(exited)
	running := s.start(s.spec("task/running", "run"))
	for _, id := range []string{exited, running} {
		for try := 1; try <= 2; try++ {
			if err := s.rt.Remove(ctx, id); err != nil {
				t.Fatalf("remove %s (%d): %v; want success", id, try, err)
			}
		}
		if _, err := s.rt.Inspect(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("inspect of a removed container: %v; want ErrNotFound", err)
		}
	}
	if _, err := s.rt.Find(ctx, "task/running", "app"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("find of a removed container: %v; want ErrNotFound", err)
	}
	if list, err := s.rt.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list after removal: %+v, %v; want none", list, err)
	}
}

// The fence against a late start (RemoveUnlessStarted): a container that never ran is
// removed, and a start after that cannot run it (ErrNotFound), nor can a second fence find it;
// a running one is refused with ErrRunning and keeps running; one that ran and exited is
// refused too, and kept — the agent may make a fenced container again, so one that ran must
// never pass for one that did not.
func aRemoveUnlessStartedFencesAStart(t *testing.T, s *subject) {
	ctx := context.Background()
	created := s.create(s.spec("task/fenced", "run"))
	if err := s.rt.RemoveUnlessStarted(ctx, created); err != nil {
		t.Fatalf("fence of a container never started: %v; want it removed", err)
	}
	if err := s.rt.Start(ctx, created); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("a start after the fence: %v; want ErrNotFound", err)
	}
	if err := s.rt.RemoveUnlessStarted(ctx, created); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("a second fence: %v; want ErrNotFound", err)
	}
	running := s.start(s.spec("task/landed", "run"))
	if err := s.rt.RemoveUnlessStarted(ctx, running); !errors.Is(err, runtime.ErrRunning) {
		t.Fatalf("fence of a running container: %v; want ErrRunning", err)
	}
	if st := s.inspect(running); !st.Running {
		t.Fatalf("after a refused fence: %+v; want it still running", st)
	}
	exited := s.start(s.spec("task/ended", "exit", "0"))
	s.exit(exited)
	if err := s.rt.RemoveUnlessStarted(ctx, exited); !errors.Is(err, runtime.ErrRunning) {
		t.Fatalf("fence of an exited container: %v; want ErrRunning", err)
	}
	if list, err := s.rt.List(ctx); err != nil || len(list) != 2 || !slices.ContainsFunc(list, func(st runtime.State) bool { return st.ID == exited && st.Exited }) {
		t.Fatalf("list after the fences: %+v, %v; want the running %s and the exited %s", list, err, running, exited)
	}
}

// A container the runtime does not have is ErrNotFound to every call that needs it, and a
// removal of it succeeds (gone already).
func anUnknownContainerIsNotFound(t *testing.T, s *subject) {
	ctx := context.Background()
	// A well-formed id no engine holds.
	const id = "0000000000000000000000000000000000000000000000000000000000c0ffee"
	if _, err := s.rt.Inspect(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("inspect: %v; want ErrNotFound", err)
	}
	if err := s.rt.Start(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("start: %v; want ErrNotFound", err)
	}
	if err := s.rt.Stop(ctx, id, time.Second); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("stop: %v; want ErrNotFound", err)
	}
	if err := s.rt.Remove(ctx, id); err != nil {
		t.Fatalf("remove: %v; want success", err)
	}
}

// A runtime touches only containers labelled with its own agent id: another agent's on the
// same engine is not listed, found, inspected, started, stopped or removed, and one ARN on
// two agents makes two containers.
func otherAgentsContainersAreNeverTouched(t *testing.T, s *subject) {
	ctx := context.Background()
	otherAgent := agentID("other")
	other := s.eng.Open(t, otherAgent)
	theirs, err := other.Create(ctx, s.spec("task/shared", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	started, err := other.Inspect(ctx, theirs)
	if err != nil {
		t.Fatal(err)
	}
	mine := s.eng.Open(t, s.agent) // opened after theirs was made: the engine as it is now
	if list, err := mine.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("lists another agent's containers: %+v, %v", list, err)
	}
	if _, err := mine.Find(ctx, "task/shared", "app"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("finds another agent's container: %v", err)
	}
	if _, err := mine.Inspect(ctx, theirs); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("inspects another agent's container: %v", err)
	}
	if err := mine.Stop(ctx, theirs, time.Second); err == nil {
		t.Fatal("stopped another agent's container")
	}
	if err := mine.Start(ctx, theirs); err == nil {
		t.Fatal("started another agent's container")
	}
	_ = mine.Remove(ctx, theirs) // success or refusal, it must leave the container be
	if own, err := mine.Create(ctx, s.spec("task/shared", "run")); err != nil || own == theirs {
		t.Fatalf("create of the same ARN: %s, %v; want a container of its own", own, err)
	}
	// A runtime opened afresh for the owner reads the engine, not a memory of it.
	after, err := s.eng.Open(t, otherAgent).Inspect(ctx, theirs)
	if err != nil || !after.Running || !after.StartedAt.Equal(started.StartedAt) {
		t.Fatalf("another agent's container was touched: %+v, %v; it was %+v", after, err, started)
	}
}

// A health check reaches its verdict and the health stream says so with the container's
// labels: a passing check turns HEALTHY, a failing one UNHEALTHY once its retries are spent;
// an inspect says the same, and a new subscription starts with the current verdict.
func healthChecksReachTheirVerdicts(t *testing.T, s *subject) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	changes, err := s.rt.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(task string, words ...string) runtime.CreateSpec {
		spec := s.spec(task, "serve", "8080")
		spec.Container.HealthCheck = &event.HealthCheck{Command: append([]string{"CMD", "/testbox"}, words...), IntervalS: 1, TimeoutS: 5, Retries: 2}
		return spec
	}
	healthy := s.start(check("task/healthy", "probe", "8080"))
	sick := s.start(check("task/sick", "exit", "1"))
	if h := s.verdict(changes, healthy, event.HealthHealthy); h.Task != "task/healthy" || h.Container != "app" {
		t.Fatalf("health change lacks its labels: %+v", h)
	}
	if st := s.inspect(healthy); st.Health != event.HealthHealthy {
		t.Fatalf("inspect after HEALTHY: %+v", st)
	}
	again, err := s.rt.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.verdict(again, healthy, event.HealthHealthy)
	s.verdict(changes, sick, event.HealthUnhealthy)
	if st := s.inspect(sick); st.Health != event.HealthUnhealthy || !st.Running {
		t.Fatalf("inspect after UNHEALTHY: %+v; want it unhealthy and running", st)
	}
}

// A published port with no host port gets one, and an inspect of the running container
// reports the binding as bound: container port, protocol, host address, host port. The list
// says the same of it: a restart learns a running container's ports from the list alone
// (reconcile), and its RUNNING must carry them.
func publishedPortsAreReportedAsBound(t *testing.T, s *subject) {
	spec := s.spec("task/ports", "serve", "8080")
	spec.Container.Ports = []event.PortMapping{{ContainerPort: 8080, HostIP: "127.0.0.1"}}
	id := s.start(spec)
	st := s.inspect(id)
	if len(st.Bindings) != 1 {
		t.Fatalf("bindings %+v; want one", st.Bindings)
	}
	if b := st.Bindings[0]; b.ContainerPort != 8080 || b.Protocol != "tcp" || b.HostIP != "127.0.0.1" || b.HostPort <= 0 {
		t.Fatalf("binding %+v; want 8080/tcp on 127.0.0.1 at an assigned host port", b)
	}
	list, err := s.rt.List(context.Background())
	if err != nil || len(list) != 1 || !slices.Equal(list[0].Bindings, st.Bindings) {
		t.Fatalf("list: %+v, %v; want the running container with the bindings inspect gave, %+v", list, err, st.Bindings)
	}
}

// A container's log holds what it wrote on stdout, in the engine's multiplexed stream, and
// a tail keeps only the last lines.
func logsCarryWhatTheContainerWrote(t *testing.T, s *subject) {
	id := s.start(s.spec("task/logs", "run"))
	s.logged(id, "testbox: [run]\n")
	rc, err := s.rt.Logs(context.Background(), id, runtime.LogOptions{Tail: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out, errOut bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errOut, rc); err != nil {
		t.Fatal(err)
	}
	if got := out.String() + errOut.String(); got != "testbox: [run]\n" {
		t.Fatalf("tail 1: %q; want the start line alone", got)
	}
}

// A present image is used as it is under if-not-present and never (not pulled, no note,
// its id and digest given); never of an absent image fails naming it and the policy; an
// unknown policy is refused. The disk images live on has a size.
func pullsFollowThePolicy(t *testing.T, s *subject) {
	ctx := context.Background()
	for _, p := range []string{"", event.PullIfNotPresent, event.PullNever} {
		out, err := s.rt.PullImage(ctx, s.eng.Image, p)
		if err != nil || out.Pulled || out.Note != "" || !out.RefExisted || !strings.HasPrefix(out.ImageID, "sha256:") || !strings.HasPrefix(out.Digest, "sha256:") {
			t.Fatalf("pull_policy %q of a present image: %+v, %v; want it as it is", p, out, err)
		}
	}
	const absent = "agentd-contract/absent:1"
	if _, err := s.rt.PullImage(ctx, absent, event.PullNever); err == nil || !strings.Contains(err.Error(), absent) || !strings.Contains(err.Error(), "pull_policy is never") {
		t.Fatalf("pull_policy never of an absent image: %v; want an error naming it and the policy", err)
	}
	if _, err := s.rt.PullImage(ctx, s.eng.Image, "sometimes"); err == nil || !strings.Contains(err.Error(), `"sometimes"`) {
		t.Fatalf("pull_policy sometimes: %v; want refused, naming it", err)
	}
	if free, total, err := s.rt.ImageDiskFree(ctx); err != nil || total == 0 || free > total {
		t.Fatalf("image disk: %d free of %d, %v", free, total, err)
	}
}
