package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/model"
	"github.com/agentd/agentd/internal/simruntime"
)

// The end-to-end tests run the real binary as processes against the reference control plane
// on loopback, and kill the agent with SIGKILL.

// builds caches the binaries the process-level tests run, by build tags.
var builds struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

// buildAgentd builds agentd once per set of build tags ("" or e.g. "failpoints").
func buildAgentd(t *testing.T, tags string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	if bin, ok := builds.bins[tags]; ok {
		return bin
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "agentd-e2e-bin-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir, builds.bins = dir, map[string]string{}
	}
	bin := filepath.Join(builds.dir, "agentd"+tags)
	if out, err := exec.Command("go", "build", "-tags", tags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %q: %v\n%s", tags, err, out)
	}
	builds.bins[tags] = bin
	return bin
}

// agentdBinary is the build the tests run: AGENTD_TEST_TAGS builds it with a planted bug, to
// watch a loop catch it (AGENTD_TEST_TAGS=syncbug on the power-loss loop: tasks acknowledged
// and lost never settle).
func agentdBinary(t *testing.T) string { return buildAgentd(t, os.Getenv("AGENTD_TEST_TAGS")) }

func TestMain(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// proc is a running agentd process whose JSON log lines are read as they come.
type proc struct {
	cmd   *exec.Cmd
	lines chan map[string]any
	raw   *bytes.Buffer
	mu    sync.Mutex
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	return startBinary(t, agentdBinary(t), args...)
}

// startBinary is startProc with another build of agentd (an older release: upgrade_test.go).
func startBinary(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, lines: make(chan map[string]any, 4096), raw: &bytes.Buffer{}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.raw.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				select {
				case p.lines <- m:
				default:
				}
			}
		}
		close(p.lines)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// await reads log lines until one has the message, and returns it.
func (p *proc) await(t *testing.T, msg string, within time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case m, ok := <-p.lines:
			if !ok {
				t.Fatalf("process ended before logging %q:\n%s", msg, p.log())
			}
			if m["message"] == msg {
				return m
			}
		case <-deadline:
			t.Fatalf("no %q logged within %v:\n%s", msg, within, p.log())
		}
	}
}

// awaitEach waits for every one of msgs, in whatever order the process logs them (lines from
// different goroutines have no order), and returns each message's line.
func (p *proc) awaitEach(t *testing.T, within time.Duration, msgs ...string) map[string]map[string]any {
	t.Helper()
	got := map[string]map[string]any{}
	deadline := time.After(within)
	for len(got) < len(msgs) {
		select {
		case m, ok := <-p.lines:
			if !ok {
				t.Fatalf("process ended before logging %q:\n%s", msgs, p.log())
			}
			for _, msg := range msgs {
				if m["message"] == msg {
					got[msg] = m
				}
			}
		case <-deadline:
			t.Fatalf("not all of %q logged within %v:\n%s", msgs, within, p.log())
		}
	}
	return got
}

func (p *proc) kill() {
	if p.cmd.Process != nil && p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

// ownClient reads the agent's API as its own tools do (forensics.APIClient: the Agentd-Client
// header, without which root's loopback connection reads only the open pages).
var ownClient, _ = forensics.APIClient("http://127.0.0.1")

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := ownClient.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil {
		_ = json.Unmarshal(b, v)
	}
	return resp.StatusCode
}

func postJSON(t *testing.T, url string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d", url, resp.StatusCode)
	}
}

type cpTask struct {
	ARN        string `json:"arn"`
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	Containers map[string]struct {
		Status   string `json:"status"`
		ExitCode *int   `json:"exit_code"`
	} `json:"containers"`
}

// awaitSettled waits until the control plane has every one of tasks STOPPED and the agent
// lists none: everything cleaned. Each look runs the checks in during first.
func awaitSettled(t *testing.T, cpURL, api string, tasks int, within time.Duration, diag func() string, during ...func()) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, check := range during {
			check()
		}
		var view struct{ Tasks []cpTask }
		getJSON(t, cpURL+"/v1/tasks", &view)
		var live struct{ Tasks []json.RawMessage }
		code := getJSON(t, api+"/v1/tasks", &live)
		stopped := 0
		for _, task := range view.Tasks {
			if task.Status == "STOPPED" {
				stopped++
			}
		}
		if stopped == tasks && code == 200 && len(live.Tasks) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled after %v: %d of %d STOPPED at the control plane, %d live at the agent (HTTP %d)\n%s", within, stopped, tasks, len(live.Tasks), code, diag())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noViolations fails the test if the control plane saw a protocol rule broken.
func noViolations(t *testing.T, cpURL string) {
	t.Helper()
	var v struct{ Violations []map[string]any }
	getJSON(t, cpURL+"/v1/violations", &v)
	if len(v.Violations) > 0 {
		t.Fatalf("control plane saw protocol violations: %v", v.Violations)
	}
}

// startAgentProc runs `agentd run` (the simulated runtime unless extra says otherwise) and
// waits until it serves.
func startAgentProc(t *testing.T, dataDir, backend string, extra ...string) (*proc, string) {
	t.Helper()
	args := append([]string{"run", "--runtime", "sim", "--data-dir", dataDir, "--backend", backend,
		"--listen", "127.0.0.1:0", "--cleanup-wait", "1s", "--log-format", "json", "--agent-id", "agent-e2e"}, extra...)
	a := startProc(t, args...)
	m := a.await(t, "agent running", 30*time.Second)
	return a, "http://" + m["listen"].(string)
}

// TestEndToEndUnderFaultsAndKills runs the control plane with throttling, 5xx, dropped
// connections and re-sent acknowledged payloads, and an agent that is SIGKILLed three times
// while tasks run and reports are throttled. At the end every task is cleaned, every change
// was accepted under one id, the control plane saw no protocol violation, and no container
// was created twice.
func TestEndToEndUnderFaultsAndKills(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: spawns processes")
	}
	t.Parallel()
	faultsEndToEnd(t, "web:1", "agent-e2e", 24, 3)
}

// The kill -9 loop (make test-crash): 50 SIGKILLs at random moments while a stream of tasks
// arrives under throttling, 5xx, dropped connections and re-sent payloads.
func TestCrashLoop(t *testing.T) {
	if os.Getenv("AGENTD_CRASH_LOOP") != "1" {
		t.Skip("the kill -9 loop: run with make test-crash")
	}
	faultsEndToEnd(t, "web:1", "agent-e2e", 100, 50)
}

// The same on the Docker Engine, with the test image.
func TestDockerEndToEndUnderFaultsAndKills(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	id := fmt.Sprintf("agent-e2e-docker-%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + id) })
	faultsEndToEnd(t, "agentd-testbox:latest", id, 24, 3, "--runtime", "docker")
	if left := dockerPS(t, "label=io.agentd.agent="+id); len(left) != 0 {
		t.Fatalf("containers left behind: %v", left)
	}
}

// faultsEndToEnd is the scenario the three tests above share: start a faulty world, stream
// the workload into it while the agent is killed, then check what the control plane saw,
// that the agent stops cleanly, and that the journal shows nothing ran twice.
func faultsEndToEnd(t *testing.T, image, agentID string, tasks, kills int, runArgs ...string) {
	w := startFaultyWorld(t, agentID, runArgs...)
	plan := planFaultWorkload(image, tasks)
	w.streamUnderKills(t, plan, kills)
	awaitSettled(t, w.cpURL, w.api, tasks, 120*time.Second, w.agent.log)
	noViolations(t, w.cpURL)
	plan.checkControlPlaneView(t, w.cpURL)
	w.stopCleanly(t)
	plan.checkJournal(t, w.data)
}

// taskKind is one kind of task in the fault workload: what its container runs and what the
// control plane may see of it at the end.
type taskKind struct {
	name string
	// command is what the nth task of the kind runs (nil: the task has no container).
	command func(n int, rng *rand.Rand) []string
	// stoppedByControlPlane: it runs until the control plane stops it, so it may be stopped
	// before its container ever existed (STOPPED with a reason, no exit code, never created).
	stoppedByControlPlane bool
}

var (
	longRunner = taskKind{name: "long runner", stoppedByControlPlane: true,
		command: func(int, *rand.Rand) []string { return []string{"run"} }}
	quickExit = taskKind{name: "quick exit", // exit codes 0..4 in turn
		command: func(n int, _ *rand.Rand) []string { return []string{"exit", fmt.Sprint(n % 5)} }}
	sleeper = taskKind{name: "sleeper", // 0.2–1.7 s, then exit codes 0..2 in turn
		command: func(n int, rng *rand.Rand) []string {
			return []string{"sleep", fmt.Sprintf("%dms", 200+rng.IntN(1500)), fmt.Sprint(n % 3)}
		}}
	// invalid has no container: the agent records it STOPPED and never runs anything.
	invalid = taskKind{name: "invalid"}
)

// faultWorkloadCycle is the stream of tasks: it repeats this pattern, except that
// task/e2e-05 (a quick exit in the pattern) is invalid.
var faultWorkloadCycle = []taskKind{longRunner, quickExit, sleeper, sleeper}

const invalidTaskAt = 5

type plannedTask struct {
	arn  string
	kind taskKind
	body map[string]any
}

type faultWorkload struct{ tasks []plannedTask }

func planFaultWorkload(image string, n int) faultWorkload {
	rng := rand.New(rand.NewPCG(7, 7))
	seen := map[string]int{}
	var w faultWorkload
	for i := range n {
		kind := faultWorkloadCycle[i%len(faultWorkloadCycle)]
		if i == invalidTaskAt {
			kind = invalid
		}
		arn := fmt.Sprintf("task/e2e-%02d", i)
		containers := []map[string]any{}
		if kind.command != nil {
			containers = append(containers, map[string]any{"name": "app", "image": image, "command": kind.command(seen[kind.name], rng)})
		}
		seen[kind.name]++
		w.tasks = append(w.tasks, plannedTask{arn: arn, kind: kind, body: map[string]any{"arn": arn, "containers": containers}})
	}
	return w
}

// withContainer counts the tasks that have a container to create.
func (w faultWorkload) withContainer() int {
	n := 0
	for _, p := range w.tasks {
		if p.kind.command != nil {
			n++
		}
	}
	return n
}

// longRunners counts the tasks the control plane stops.
func (w faultWorkload) longRunners() int {
	n := 0
	for _, p := range w.tasks {
		if p.kind.stoppedByControlPlane {
			n++
		}
	}
	return n
}

func (w faultWorkload) kindOf(arn string) taskKind {
	for _, p := range w.tasks {
		if p.arn == arn {
			return p.kind
		}
	}
	return taskKind{}
}

// faultyWorld is the reference control plane with throttling, 5xx, dropped connections and
// re-sent acknowledged payloads, and the agent (the real binary) reporting to it.
type faultyWorld struct {
	cpURL, api, data, agentID string
	agent                     *proc
	runArgs                   []string
}

func startFaultyWorld(t *testing.T, agentID string, runArgs ...string) *faultyWorld {
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--throttle-rps", "4", "--throttle-burst", "2", "--fail-rate", "0.05", "--drop-rate", "0.05", "--resend-acked")
	w := &faultyWorld{
		cpURL:   "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string),
		data:    filepath.Join(t.TempDir(), "data"),
		agentID: agentID,
		runArgs: append(runArgs, "--agent-id", agentID),
	}
	w.agent, w.api = startAgentProc(t, w.data, w.cpURL, w.runArgs...)
	return w
}

// streamUnderKills assigns the workload in as many batches as there are kills; after each
// batch the agent runs a random 0.3–1 s and is SIGKILLed while work is in flight and reports
// are throttled. After every second kill, and at the end, the control plane stops the long
// runners assigned so far.
func (w *faultyWorld) streamUnderKills(t *testing.T, plan faultWorkload, kills int) {
	rng := rand.New(rand.NewPCG(7, 8))
	var runners []string
	assign := func(p plannedTask) {
		postJSON(t, w.cpURL+"/v1/tasks", map[string]any{"agent": w.agentID, "task": p.body})
		if p.kind.stoppedByControlPlane {
			runners = append(runners, p.arn)
		}
	}
	stopRunners := func() {
		for _, arn := range runners {
			postJSON(t, w.cpURL+"/v1/tasks/"+arn+"/stop", nil)
		}
		runners = nil
	}
	next := 0
	for k := 1; k <= kills; k++ {
		for ; next < len(plan.tasks)*k/kills; next++ {
			assign(plan.tasks[next])
		}
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond) // the kill lands at a random moment
		if k%2 == 0 {
			stopRunners()
		}
		w.agent.kill()
		w.agent, w.api = startAgentProc(t, w.data, w.cpURL, w.runArgs...)
	}
	for ; next < len(plan.tasks); next++ {
		assign(plan.tasks[next])
	}
	stopRunners()
}

// checkControlPlaneView: the invalid task reported no container; every other one reported
// its container STOPPED with an exit code — also one whose container a killed agent was
// creating and Docker rolled back after the next agent adopted it, and one whose start two
// killed agents asked and that never ran (each is made again: checkJournal finds how) —
// except a long runner the control plane stopped before its container ever ran.
func (plan faultWorkload) checkControlPlaneView(t *testing.T, cpURL string) {
	t.Helper()
	var view struct{ Tasks []cpTask }
	getJSON(t, cpURL+"/v1/tasks", &view)
	for _, task := range view.Tasks {
		kind := plan.kindOf(task.ARN)
		if kind.command == nil {
			if len(task.Containers) != 0 {
				t.Fatalf("%s task reported containers: %+v", kind.name, task)
			}
			continue
		}
		app, ok := task.Containers["app"]
		stoppedEarly := kind.stoppedByControlPlane && app.ExitCode == nil
		if !ok || app.Status != "STOPPED" || (app.ExitCode == nil && !stoppedEarly) {
			t.Fatalf("task %s (%s): container not reported STOPPED with an exit code: %+v", task.ARN, kind.name, task)
		}
	}
}

// stopCleanly: SIGTERM stops the agent cleanly, exit 0, with its clean-stop line.
func (w *faultyWorld) stopCleanly(t *testing.T) {
	t.Helper()
	_ = w.agent.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- w.agent.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent exited with %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not exit within 10 s of SIGTERM")
	}
	if !strings.Contains(w.agent.log(), `"agent stopped"`) {
		t.Fatal("no clean-stop line in the agent's log")
	}
}

// checkJournal: the journal verifies and agrees with the model, and nothing ran twice: one
// creation per container, and one more for each time Docker rolled it back before it ever
// started (container_rolled_back, once) and each time it was fenced to be made again — each
// such fence after two starts asked of the container it removed, and the container made again
// run to its exit unless the control plane stopped it first. A fence that is not followed by
// the container made again is only of a task the control plane stopped. (On the simulated
// runtime, which numbers every container it ever made, the runtime agrees.)
func (plan faultWorkload) checkJournal(t *testing.T, data string) {
	t.Helper()
	j, err := journal.Open(filepath.Join(data, journal.FileName), journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if rep, err := forensics.Verify(j); err != nil || len(rep.Findings) > 0 {
		t.Fatalf("journal verify: %v %v", rep.Findings, err)
	}
	if err := model.Check(j); err != nil {
		t.Fatal(err)
	}
	created, rolledBack, madeAgain, exited := map[string]int{}, map[string]int{}, map[string]int{}, map[string]bool{}
	starts := map[string]int{} // starts asked of the container the runtime holds now
	err = j.Iterate(1, func(r event.Record) error {
		k := r.Task + "/" + r.Container
		switch ev := r.Event.(type) {
		case *event.CallStarted:
			if ev.Call == "start" {
				starts[k]++
			}
		case *event.ContainerRemoved:
			switch {
			case ev.Fence && ev.Again && starts[k] < 2:
				t.Fatalf("%s fenced to be made again after %d starts asked of it; want 2", k, starts[k])
			case ev.Fence && ev.Again:
				madeAgain[k]++
				starts[k] = 0
			case ev.Fence && !plan.kindOf(r.Task).stoppedByControlPlane:
				t.Fatalf("%s fenced and not made again, yet its task (%s) is not one the control plane stops", k, plan.kindOf(r.Task).name)
			}
		case *event.ContainerTransitioned:
			if ev.To == event.StatusCreated {
				created[k]++
			}
			if ev.To == event.StatusStopped && ev.ExitCode != nil {
				exited[k] = true
			}
		case *event.ContainerRolledBack:
			rolledBack[k]++
			starts[k] = 0
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fenced := 0
	for k, n := range madeAgain {
		if !exited[k] && !plan.kindOf(strings.TrimSuffix(k, "/app")).stoppedByControlPlane {
			t.Fatalf("%s fenced and made again %d times, and never ran to its exit", k, n)
		}
		fenced += n
		t.Logf("%s: two killed agents asked its start and it never ran: fenced and made again (%d times); ran to its exit: %v", k, n, exited[k])
	}
	t.Logf("%d containers fenced and made again, %d fences in all", len(madeAgain), fenced)
	runners, total := plan.longRunners(), 0
	for k, n := range created {
		total += n
		// A long runner the control plane stopped between the rollback (or fence) and the
		// next create is not made again: it is STOPPED without having run (seen once in CI:
		// task/e2e-16).
		again := rolledBack[k] + madeAgain[k]
		stoppedFirst := n == again && plan.kindOf(strings.TrimSuffix(k, "/app")).stoppedByControlPlane
		if (n != 1+again && !stoppedFirst) || rolledBack[k] > 1 {
			t.Fatalf("%s created %d times, rolled back by the runtime %d times, fenced to be made again %d times", k, n, rolledBack[k], madeAgain[k])
		}
		if rolledBack[k] > 0 {
			t.Logf("%s: Docker rolled back its create after a kill; created again", k)
		}
	}
	// Tasks the control plane stopped may have been stopped before their container existed.
	if want := plan.withContainer(); len(created) > want || len(created) < want-runners {
		t.Fatalf("%d containers created; want %d, less at most the %d stopped by the control plane", len(created), want, runners)
	}
	if _, err := os.Stat(filepath.Join(data, simruntime.FileName)); err == nil {
		made, left, err := simruntime.Stats(data)
		if err != nil {
			t.Fatal(err)
		}
		if made != int64(total) || left != 0 {
			t.Fatalf("the runtime created %d containers (%d left); the journal says %d, none left", made, left, total)
		}
	}
}

// The README's run command: `agentd dev` finishes by itself on a fresh data dir and exits 0.
func TestDevDemoFinishes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: spawns processes")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "dev")
	cmd := exec.Command(agentdBinary(t), "dev", "--tasks", "12", "--cleanup-wait", "300ms", "--throttle-rps", "4", "--data-dir", dir, "--timeout", "90s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agentd dev: %v\n%s", err, out)
	}
	for _, want := range []string{"done in", "12 tasks run and cleaned", "0 protocol violations", "journal verified: no task was cleaned before", "agentd journal verify"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "journal.db")); err != nil {
		t.Fatalf("no journal left to explore: %v", err)
	}
}

// Bad flags exit non-zero naming the flag; a second agent on the same data dir says who holds it.
func TestBadInputAtTheCommandLine(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	t.Parallel()
	dir, other := t.TempDir(), t.TempDir()
	if err := os.Symlink(dir, filepath.Join(other, "link")); err != nil {
		t.Fatal(err)
	}
	docker := "run --runtime docker --backend http://x --listen 127.0.0.1:0 --data-dir " + other + "/data --allow-bind-root " + dir
	for args, want := range map[string]string{
		"run --runtime sim --backend http://x --cleanup-wait banana":   "--cleanup-wait",
		"run --runtime sim --backend ftp://x --data-dir " + dir + "/a": "--backend",
		"run --runtime podman --backend http://x":                      "--runtime",
		"controlplane --fail-rate 2":                                   "--fail-rate",
		"run --runtime sim --backend http://x --allow-bind-root rel":   "--allow-bind-root",
		// a task binding the data dir could rewrite the journal and read the seal key
		"run --runtime sim --backend http://x --allow-bind-root " + dir + " --data-dir " + dir + "/held": "--data-dir " + dir + "/held lies under --allow-bind-root " + dir,
		// a task binding the engine's socket could start a privileged container: root on the host
		docker + " --docker-host unix://" + dir + "/docker.sock":            "--docker-host socket " + dir + "/docker.sock lies under --allow-bind-root " + dir,
		docker + " --docker-host unix://" + other + "/link/run/docker.sock": "lies under --allow-bind-root " + dir,
		"DOCKER_HOST=unix://" + dir + "/d.sock " + docker:                   "DOCKER_HOST socket " + dir + "/d.sock lies under --allow-bind-root " + dir,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // an agent that starts is a failure, not a hang
		argv := strings.Fields(args)
		cmd := exec.CommandContext(ctx, agentdBinary(t))
		for len(argv) > 0 && strings.Contains(argv[0], "=") { // leading NAME=value: the environment
			if cmd.Env == nil {
				cmd.Env = os.Environ()
			}
			cmd.Env = append(cmd.Env, argv[0])
			argv = argv[1:]
		}
		cmd.Args = append(cmd.Args, argv...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("agentd %s: %v\n%s\nwant a failure naming %s", args, err, out, want)
		}
	}
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	startAgentProc(t, filepath.Join(dir, "data"), cpURL)
	out, err := exec.Command(agentdBinary(t), "run", "--runtime", "sim", "--data-dir", filepath.Join(dir, "data"), "--backend", cpURL, "--listen", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "locked by another agentd process (pid") {
		t.Fatalf("second agent on the same data dir: %v\n%s", err, out)
	}
}

// A corrupted journal at start: the agent refuses to start, names the bad record, points to
// `agentd journal verify`, and drops nothing; verify then lists the problem.
func TestCorruptJournalRefusesToStart(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "journals", "dev.db"))
	if err != nil {
		t.Fatal(err)
	}
	idx := strings.Index(string(b), "task/dev-003")
	if idx < 0 {
		t.Fatal("golden journal lacks task/dev-003 in clear")
	}
	b[idx+9] ^= 0x01
	if err := os.WriteFile(filepath.Join(data, "journal.db"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(agentdBinary(t), "run", "--runtime", "sim", "--data-dir", data, "--backend", "http://127.0.0.1:1",
		"--listen", "127.0.0.1:0", "--agent-id", "agent-dev").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "checksum mismatch") || !strings.Contains(string(out), "agentd journal verify") || !strings.Contains(string(out), "record ") {
		t.Fatalf("start on a corrupt journal: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "goroutine ") {
		t.Fatalf("a stack trace instead of a message:\n%s", out)
	}
	after, _ := os.ReadFile(filepath.Join(data, "journal.db"))
	if len(after) < len(b) {
		t.Fatal("the refused journal was truncated")
	}
	out, err = exec.Command(agentdBinary(t), "journal", "verify", "--data-dir", data).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "checksum mismatch") {
		t.Fatalf("verify: %v\n%s", err, out)
	}
}
