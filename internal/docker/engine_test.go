package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// The Docker tests run against the real engine of this machine when AGENTD_DOCKER_TESTS=1
// (make test-docker, which builds agentd-testbox:latest first).
func dockerEngine(t *testing.T) (*Engine, string) {
	t.Helper()
	return dockerEngineWith(t, PullConfig{})
}

// needDockerTests skips the test unless the Docker Engine tests were asked for. A test that
// builds fixtures for the engine (a registry, images pushed to it) says so first, so that
// without the engine the fixtures are never built.
func needDockerTests(t *testing.T) {
	t.Helper()
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
}

// dockerEngineWith is dockerEngine with pulls as pc says.
func dockerEngineWith(t *testing.T, pc PullConfig) (*Engine, string) {
	t.Helper()
	needDockerTests(t)
	agent := fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	return agentEngine(t, agent, pc), agent
}

// agentEngine is a runtime of the agent id given: a second one of the same id is that agent
// restarted.
func agentEngine(t *testing.T, agent string, pc PullConfig) *Engine {
	t.Helper()
	e, err := NewEngine(context.Background(), "", agent, pc)
	if e != nil && errors.Is(err, runtime.ErrUnavailable) {
		err = awaitNamed(e, 2*time.Minute) // a loaded engine: named by the retries, or never
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		removeAgentContainers(t, agent)
		e.Close()
	})
	return e
}

// removeAgentContainers removes every container of the test's agent id and fails the test if
// the code under test left any behind that it should have removed.
func removeAgentContainers(t *testing.T, agent string) {
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+runtime.LabelAgent+"="+agent).Output()
	for _, id := range strings.Fields(string(out)) {
		_ = exec.Command("docker", "rm", "-f", "-v", id).Run()
	}
	// The bind volumes of containers removed here rather than by the engine.
	out, _ = exec.Command("docker", "volume", "ls", "-q", "--filter", "label="+runtime.LabelAgent+"="+agent).Output()
	for _, v := range strings.Fields(string(out)) {
		_ = exec.Command("docker", "volume", "rm", "-f", v).Run()
	}
}

// onPodman says whether the engine was named Podman.
func onPodman(e *Engine) bool {
	kind, _ := e.kindNow()
	return kind == kindPodman
}

// awaitNamed waits until the engine is named, for at most d: knownKind's error otherwise.
func awaitNamed(e *Engine, d time.Duration) error {
	return awaitIdentity(e, d, func(err error) bool { return err == nil })
}

// awaitIdentity waits until knownKind's error (nil: named) is one done takes, for at most d;
// it returns the last.
func awaitIdentity(e *Engine, d time.Duration, done func(error) bool) error {
	deadline := time.After(d)
	for {
		_, changed := e.kindNow()
		if _, err := e.knownKind(); done(err) {
			return err
		}
		select {
		case <-changed:
		case <-deadline:
			_, err := e.knownKind()
			return err
		}
	}
}

// differsOnPodman skips the rest of a test on Podman, saying why: what it checks is a documented
// difference of Podman's (README "On Podman"), not a promise the agent keeps there.
func differsOnPodman(t *testing.T, e *Engine, why string) {
	t.Helper()
	if onPodman(e) {
		t.Skip("on Podman: " + why)
	}
}

// testbox is the test image (make testbox-image); AGENTD_TESTBOX_IMAGE names another build
// of it, for a machine where several checkouts share the engine.
var testbox = cmp.Or(os.Getenv("AGENTD_TESTBOX_IMAGE"), "agentd-testbox:latest")

func start(t *testing.T, e *Engine, task string, cmd ...string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := e.PullImage(ctx, testbox, ""); err != nil {
		t.Fatalf("pull of a present image: %v", err)
	}
	id, err := e.Create(ctx, runtime.CreateSpec{Task: task, Container: event.ContainerSpec{Name: "app", Image: testbox, Command: cmd, Env: map[string]string{"A": "1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func waitExit(t *testing.T, e *Engine, id string) runtime.State {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := e.Inspect(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Exited {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not exit in 2 min", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDockerCommandWordsAndExitCodes(t *testing.T) {
	e, _ := dockerEngine(t)
	ctx := context.Background()
	exits, err := e.Exits(ctx, time.Now().Add(-time.Second).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	quick := start(t, e, "task/quick", "exit", "3")
	sleeper := start(t, e, "task/sleep", "sleep", "300ms", "5")
	runner := start(t, e, "task/run", "run")
	if st := waitExit(t, e, quick); st.ExitCode != 3 {
		t.Fatalf("exit 3 exited %d", st.ExitCode)
	}
	if st := waitExit(t, e, sleeper); st.ExitCode != 5 {
		t.Fatalf("sleep 300ms 5 exited %d", st.ExitCode)
	}
	if st, _ := e.Inspect(ctx, runner); !st.Running {
		t.Fatal("run is not running")
	}
	waitLog(t, e, runner, "testbox:") // its SIGTERM handler is set: as PID 1 it would ignore one before
	if err := e.Stop(ctx, runner, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := waitExit(t, e, runner); st.ExitCode != 143 {
		t.Fatalf("stopped run exited %d; want 143 (SIGTERM obeyed)", st.ExitCode)
	}
	got := map[string]int{}
	timeout := time.After(30 * time.Second)
	for len(got) < 3 {
		select {
		case x := <-exits:
			got[x.ID] = x.ExitCode
			if x.Task == "" || x.Container != "app" || x.Cursor == 0 {
				t.Fatalf("exit event lacks its labels or cursor: %+v", x)
			}
		case <-timeout:
			t.Fatalf("exit events: %v", got)
		}
	}
	if got[quick] != 3 || got[sleeper] != 5 || got[runner] != 143 {
		t.Fatalf("exit events %v", got)
	}
	// Create is idempotent by task and container name.
	again, err := e.Create(ctx, runtime.CreateSpec{Task: "task/quick", Container: event.ContainerSpec{Name: "app", Image: testbox}})
	if err != nil || again != quick {
		t.Fatalf("second create: %s, %v; want the existing %s", again, err, quick)
	}
	list, _ := e.List(ctx)
	if len(list) != 3 {
		t.Fatalf("list: %d containers; want 3", len(list))
	}
	for _, id := range []string{quick, sleeper, runner} {
		if err := e.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := e.Remove(ctx, id); err != nil {
			t.Fatalf("second remove: %v; want success", err)
		}
	}
	if list, _ := e.List(ctx); len(list) != 0 {
		t.Fatalf("%d containers left after removal", len(list))
	}
}

func TestDockerMissingImageFailsThePullWithAReason(t *testing.T) {
	e, _ := dockerEngine(t)
	_, err := e.PullImage(context.Background(), "agentd-test/no-such-image:1", "")
	if err == nil || !strings.Contains(err.Error(), "pull agentd-test/no-such-image:1") {
		t.Fatalf("pull of a missing image: %v", err)
	}
}

func TestDockerUnreachableEngineNamesTheAddress(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	e, err := NewEngine(context.Background(), "tcp://127.0.0.1:1", "x", PullConfig{})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !errors.Is(err, runtime.ErrUnavailable) {
		t.Fatalf("unreachable engine: %v; want ErrUnavailable naming 127.0.0.1:1", err)
	}
	// Down, not misconfigured: the agent gets an engine that keeps answering ErrUnavailable,
	// so it can stay up, unhealthy, and reconcile once the engine answers.
	if e == nil {
		t.Fatal("no Engine for an engine that is down: the agent could not stay up")
	}
	defer e.Close()
	if _, err := e.List(context.Background()); !errors.Is(err, runtime.ErrUnavailable) {
		t.Fatalf("list on a down engine: %v; want ErrUnavailable", err)
	}
	// A pull says the engine is away (not a registry fault, which would fail the task), for
	// every policy; and so do the image calls.
	for _, p := range []string{"", "always", "never"} {
		if _, err := e.PullImage(context.Background(), "registry.example/app:1", p); !errors.Is(err, runtime.ErrUnavailable) {
			t.Fatalf("pull (%q) on a down engine: %v; want ErrUnavailable", p, err)
		}
	}
	if err := e.RemoveImage(context.Background(), "sha256:"+strings.Repeat("a", 64), []string{"registry.example/app:1"}); !errors.Is(err, runtime.ErrUnavailable) {
		t.Fatalf("remove image on a down engine: %v; want ErrUnavailable", err)
	}
	if _, _, err := e.ImageDiskFree(context.Background()); !errors.Is(err, runtime.ErrUnavailable) {
		t.Fatalf("disk free on a down engine: %v; want ErrUnavailable", err)
	}
}

// A list and an inspect see a container in the same phase (one mapping, phase): a paused
// container is running to both, as Docker's own State.Running says, and an exited one exited.
// Before, the list read only the "running" status and called a paused container neither.
func TestDockerListAndInspectAgreeOnAPausedContainer(t *testing.T) {
	e, _ := dockerEngine(t)
	ctx := context.Background()
	id := start(t, e, "task/paused", "run")
	if out, err := exec.Command("docker", "pause", id).CombinedOutput(); err != nil {
		t.Fatalf("docker pause: %v: %s", err, out)
	}
	defer exec.Command("docker", "unpause", id).Run()
	listed, err := e.Find(ctx, "task/paused", "app")
	if err != nil {
		t.Fatal(err)
	}
	inspected, err := e.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !inspected.Running || inspected.Exited || listed.Running != inspected.Running || listed.Exited != inspected.Exited {
		t.Fatalf("paused: listed running=%v exited=%v, inspected running=%v exited=%v; want both running",
			listed.Running, listed.Exited, inspected.Running, inspected.Exited)
	}
}
