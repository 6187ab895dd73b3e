package main

import (
	"bufio"
	"context"
	"encoding/json"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/docker"
)

// The agent as a container (make image): the image built from the static binary, run the way
// README's docker run line runs it, against the reference control plane on the host.

// agentImage builds the agent's image under a tag of its own (make image IMAGE=…) and
// removes it when the test ends.
func agentImage(t *testing.T, tag string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	image := "agentd:" + tag
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", "-f", image).Run() })
	if out, err := exec.Command("make", "-C", root, "image", "IMAGE="+image).CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	return image
}

// dockerRootMount is README's mount of the engine's root directory: its own file system only
// (not the containers' mounts beneath it), read-only, at the same path, so the image
// collection's free-space question (statfs of the path the engine names) sees that disk.
func dockerRootMount(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("docker", "info", "-f", "{{.DockerRootDir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := strings.TrimSpace(string(out))
	return []string{"--mount", "type=bind,source=" + dir + ",target=" + dir + ",readonly,bind-recursive=disabled"}
}

// engineSocket is the socket of the engine the tests drive (DOCKER_HOST, else Docker's own):
// the agent in a container reaches it at /var/run/docker.sock.
func engineSocket(t *testing.T) string {
	t.Helper()
	p, err := docker.SocketPath("")
	if err != nil || p == "" {
		t.Fatalf("the engine's socket: %q, %v; these tests need a unix socket", p, err)
	}
	return p
}

// onPodman says whether the engine the tests drive is Podman (its /version names the
// component), for the checks README "On Podman" documents as differing. Asked once: Podman's
// /version takes seconds, tens of them under load.
func onPodman(t *testing.T) bool {
	t.Helper()
	podman, err := enginePodman()
	if err != nil {
		t.Fatalf("docker version: %v", err)
	}
	return podman
}

var enginePodman = sync.OnceValues(func() (bool, error) {
	out, err := exec.Command("docker", "version", "--format", "{{range .Server.Components}}{{.Name}};{{end}}").Output()
	return strings.Contains(string(out), "Podman Engine;"), err
})

// runAgentContainer starts the image as README says, plus the test's flags; it returns the
// container's id and removes the container when the test ends.
func runAgentContainer(t *testing.T, name, image, dataDir string, withRoot bool, args ...string) string {
	t.Helper()
	run := []string{"run", "-d", "--name", name, "--net", "host", "--restart", "always",
		"-v", engineSocket(t) + ":/var/run/docker.sock", "-v", dataDir + ":/var/lib/agentd"}
	if withRoot {
		run = append(run, dockerRootMount(t)...)
	}
	run = append(append(run, image, "run"), args...)
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", "-v", name).Run() })
	out, err := exec.Command("docker", run...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(run, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func containerLogs(name string) string {
	out, _ := exec.Command("docker", "logs", name).CombinedOutput()
	return string(out)
}

// awaitLog waits until the container has logged a JSON line with the message, and returns it.
func awaitLog(t *testing.T, name, msg string, within time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		logs := containerLogs(name)
		for _, line := range strings.Split(logs, "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["message"] == msg {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s logged no %q within %v:\n%s", name, msg, within, tail(logs, 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func inspect(t *testing.T, name, format string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", format, name).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestDockerAgentInAContainer runs the agent's image (make image) with README's docker run
// line against the reference control plane on the host (--net host), kills the agent's
// process with SIGKILL while tasks run and lets Docker's restart policy bring it back: every
// task ends STOPPED at the control plane with its exit code and is cleaned; no container is
// removed before its task's STOPPED was accepted; none is created or started twice; and the
// agent's own container (which carries no agent label) is never stopped, killed, removed or
// otherwise touched by the agent: the engine's events for it are only the test's kill's.
func TestDockerAgentInAContainer(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	if os.Geteuid() != 0 {
		t.Skip("the containerized agent writes its data directory as root; this test cleans it up as root")
	}
	stamp := strings.ReplaceAll(time.Now().Format("150405.000"), ".", "")
	agentID := "agent-container-" + stamp
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + agentID) })
	image := agentImage(t, "e2e-"+stamp)
	if size := inspect(t, image, "{{.Size}}"); size != "" {
		t.Logf("image %s: %s bytes", image, size)
	}

	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json", "--throttle-rps", "0.5", "--throttle-burst", "1")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	since := time.Now().Add(-time.Second).Format(time.RFC3339Nano)
	name := "agentd-e2e-" + stamp
	port := freeLoopbackPort(t)
	api := "http://127.0.0.1:" + port
	id := runAgentContainer(t, name, image, filepath.Join(t.TempDir(), "data"), true,
		"--backend", cpURL, "--agent-id", agentID, "--listen", "127.0.0.1:"+port, "--cleanup-wait", "1s", "--log-format", "json")
	awaitLog(t, name, "agent running", 60*time.Second)

	img := "agentd-testbox:latest"
	tasks := map[string][]map[string]any{
		"task/c-exit":  {{"name": "app", "image": img, "command": []string{"exit", "3"}}},
		"task/c-sleep": {{"name": "app", "image": img, "command": []string{"sleep", "3s", "7"}}},
		"task/c-run":   {{"name": "app", "image": img, "command": []string{"run"}}},
		"task/c-pair":  {{"name": "app", "image": img, "command": []string{"sleep", "1s", "0"}}, {"name": "sidecar", "image": img, "command": []string{"run"}, "essential": false}},
	}
	for arn, containers := range tasks {
		postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": arn, "containers": containers}})
	}
	// The agent's own process dies (SIGKILL, as a crash or an OOM kill would) while c-run and
	// c-sleep run; Docker restarts the container under the same id.
	awaitStarted(t, agentID, since, tasks, 60*time.Second, name)
	// c-sleep's start is enough (awaitStarted): it runs 3 s, which a list under load can miss
	// whole; the kill comes within them but on the slowest hosts.
	awaitRunning(t, agentID, []string{"task/c-run"}, 60*time.Second, name)
	pid, _ := strconv.Atoi(inspect(t, name, "{{.State.Pid}}"))
	if pid <= 0 {
		t.Fatalf("the agent's container has no pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for inspect(t, name, "{{.RestartCount}} {{.State.Running}}") != "1 true" {
		if time.Now().After(deadline) {
			t.Fatalf("Docker did not restart the agent's container: %s", inspect(t, name, "{{json .State}}"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(dockerPS(t, "label=io.agentd.agent="+agentID, "label=io.agentd.task-arn=task/c-run", "status=running")) != 1 {
		t.Fatal("the agent's crash stopped its workload")
	}
	postJSON(t, cpURL+"/v1/tasks/task/c-run/stop", nil)
	guard := cleanupGuard(t, cpURL, api)
	awaitSettled(t, cpURL, api, len(tasks), 180*time.Second, func() string { return tail(containerLogs(name), 60) }, guard.check)
	noViolations(t, cpURL)
	if !guard.sawBlocked {
		t.Error("no task was ever seen stopped, unacknowledged and with its containers: the guard check proved nothing")
	}

	var view struct{ Tasks []cpTask }
	getJSON(t, cpURL+"/v1/tasks", &view)
	want := map[string]map[string]int{"task/c-exit": {"app": 3}, "task/c-sleep": {"app": 7}, "task/c-run": {"app": 143}, "task/c-pair": {"app": 0, "sidecar": 143}}
	for _, v := range view.Tasks {
		for cname, code := range want[v.ARN] {
			if c := v.Containers[cname]; c.Status != "STOPPED" || c.ExitCode == nil || *c.ExitCode != code {
				t.Errorf("%s/%s: %+v; want STOPPED with exit code %d", v.ARN, cname, c, code)
			}
		}
	}
	// A moment ahead: Podman replays nothing up to an end in the past; to one ahead it
	// replays, then streams until then, as Docker does.
	until := time.Now().Add(2 * time.Second).Format(time.RFC3339Nano)
	onceEach(t, agentID, since, until, tasks)
	if inspect(t, name, "{{.Id}} {{.State.Running}}") != id+" true" {
		t.Errorf("the agent's own container is not the one started, running: %s", inspect(t, name, "{{.Id}} {{json .State}}"))
	}
	if labels := inspect(t, name, "{{json .Config.Labels}}"); strings.Contains(labels, "io.agentd.") {
		t.Errorf("the agent's own container carries agent labels %s: an agent could take it for a task's", labels)
	}
	// What the engine did to the agent's container: started it, saw it die (the test's kill)
	// and started it again. A kill, stop, pause, exec, rename or destroy would be the agent's.
	out, err := exec.Command("docker", "events", "--since", since, "--until", until, "--filter", "container="+id, "--format", "{{.Action}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range strings.Fields(string(out)) {
		switch action {
		case "create", "start", "die", "attach", "resize", "init", "cleanup": // init, cleanup: Podman's own steps
		default:
			t.Errorf("the engine saw %q on the agent's own container (events: %s)", action, strings.Join(strings.Fields(string(out)), " "))
		}
	}
}

// awaitStarted waits until every container of the tasks has been started (running or
// exited): the kill then interrupts no create or start, whose outcome Docker may still change
// afterwards (a create rolled back), so each container must be created exactly once. It reads
// the engine's start events from since, not a list: a container that ran and was cleaned
// between two looks (exit 3 at once, a slow list under load) is still seen.
func awaitStarted(t *testing.T, agentID, since string, tasks map[string][]map[string]any, within time.Duration, name string) {
	t.Helper()
	missing := map[string]bool{}
	for arn, containers := range tasks {
		for _, c := range containers {
			missing[arn+"/"+c["name"].(string)] = true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "events", "--since", since, "--filter", "type=container", "--filter", "event=start",
		"--filter", "label=io.agentd.agent="+agentID, "--format", `{{index .Actor.Attributes "io.agentd.task-arn"}}/{{index .Actor.Attributes "io.agentd.container"}}`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("docker events: %v", err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	for len(missing) > 0 && lines.Scan() {
		delete(missing, strings.TrimSpace(lines.Text()))
	}
	if len(missing) > 0 {
		t.Fatalf("never started within %v: %v\n%s", within, slices.Sorted(maps.Keys(missing)), tail(containerLogs(name), 40))
	}
}

// awaitRunning waits until each task has a running container of the agent.
func awaitRunning(t *testing.T, agentID string, arns []string, within time.Duration, name string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, arn := range arns {
		for len(dockerPS(t, "label=io.agentd.agent="+agentID, "label=io.agentd.task-arn="+arn, "status=running")) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s never ran:\n%s", arn, tail(containerLogs(name), 40))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// guardCheck: a container of a task the agent holds STOPPED may be gone only if the control
// plane had accepted that task's STOPPED. The order of looks matters: the agent's view, then
// Docker, then (if the container is gone) the control plane. sawBlocked says whether a look
// ever found a STOPPED task's container still there (else the check proved nothing).
type guardCheck struct {
	t          *testing.T
	cpURL, api string
	sawBlocked bool
}

func cleanupGuard(t *testing.T, cpURL, api string) *guardCheck {
	return &guardCheck{t: t, cpURL: cpURL, api: api}
}

func (g *guardCheck) check() {
	var live struct {
		Tasks []struct {
			ARN        string `json:"arn"`
			Known      string `json:"known_status"`
			Containers []struct {
				RuntimeID string `json:"runtime_id"`
			} `json:"containers"`
		}
	}
	if getJSON(g.t, g.api+"/v1/tasks", &live) != 200 {
		return
	}
	for _, task := range live.Tasks {
		if task.Known != "STOPPED" {
			continue
		}
		for _, c := range task.Containers {
			if c.RuntimeID == "" {
				continue
			}
			if exec.Command("docker", "inspect", c.RuntimeID).Run() == nil {
				g.sawBlocked = true
				continue
			}
			var one cpTask
			getJSON(g.t, g.cpURL+"/v1/tasks/"+task.ARN, &one)
			if one.Status != "STOPPED" {
				g.t.Fatalf("container %s of %s removed before the control plane accepted its STOPPED", c.RuntimeID, task.ARN)
			}
		}
	}
}

// onceEach reads the engine's events for the agent's containers: each task's containers were
// created once and started once, across the agent's crash and restart.
func onceEach(t *testing.T, agentID, since, until string, tasks map[string][]map[string]any) {
	t.Helper()
	out, err := exec.Command("docker", "events", "--since", since, "--until", until,
		"--filter", "label=io.agentd.agent="+agentID, "--filter", "type=container",
		"--format", `{{.Action}} {{index .Actor.Attributes "io.agentd.task-arn"}}/{{index .Actor.Attributes "io.agentd.container"}}`).Output()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 && (f[0] == "create" || f[0] == "start") {
			counts[line]++
		}
	}
	for arn, containers := range tasks {
		for _, c := range containers {
			for _, action := range []string{"create", "start"} {
				key := action + " " + arn + "/" + c["name"].(string)
				if counts[key] != 1 {
					t.Errorf("%s: %d times; want exactly once\nevents:\n%s", key, counts[key], out)
				}
			}
		}
	}
}

// TestDockerContainerizedAgentOnTheHost: what the container changes. With README's mount of the
// engine's root directory, the containerized agent's image collection reads that disk (a
// threshold of 100% makes every cycle log its free and total bytes; the total is the host's);
// without it, the agent says it cannot read it and collects by age only (no task runs, so no
// image is at stake). And bind roots are refused at start.
func TestDockerContainerizedAgentOnTheHost(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	if os.Geteuid() != 0 {
		t.Skip("the containerized agent writes its data directory as root; this test cleans it up as root")
	}
	stamp := strings.ReplaceAll(time.Now().Format("150405.000"), ".", "")
	image := agentImage(t, "host-"+stamp)
	t.Run("bind-roots-refused", func(t *testing.T) { containerBindRootsRefused(t, image) })
	t.Run("docker-root-disk", func(t *testing.T) { containerSeesTheEnginesDisk(t, image, stamp) })
}

func containerSeesTheEnginesDisk(t *testing.T, image, stamp string) {
	out, err := exec.Command("docker", "info", "-f", "{{.DockerRootDir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(strings.TrimSpace(string(out)), &st); err != nil {
		t.Skipf("the engine's root directory is not on this machine's file system (%v): nothing to compare", err)
	}
	hostTotal := st.Blocks * uint64(st.Bsize)
	args := []string{"--backend", "http://127.0.0.1:9", "--agent-id", "agent-disk-" + stamp, "--listen", "127.0.0.1:0",
		"--image-cleanup-interval", "1s", "--image-cleanup-free-percent", "100", "--log-format", "json"}
	with := "agentd-disk-" + stamp
	runAgentContainer(t, with, image, filepath.Join(t.TempDir(), "data"), true, args...)
	m := awaitLog(t, with, "image collection: the runtime's disk is low; removing unused images regardless of age", 90*time.Second)
	if total, _ := m["total_bytes"].(float64); uint64(total) != hostTotal {
		t.Errorf("the containerized agent read a disk of %v bytes; the engine's root is on one of %d", m["total_bytes"], hostTotal)
	}
	without := "agentd-nodisk-" + stamp
	runAgentContainer(t, without, image, filepath.Join(t.TempDir(), "data"), false, args...)
	awaitLog(t, without, "image collection: cannot read the runtime's free disk space; collecting by age only", 90*time.Second)
}

// containerBindRootsRefused: the image run with --allow-bind-root, in a pid namespace of its own
// and with --pid host, exits at start with an error naming the flag and the namespace at fault
// (README "As a container": a container has a mount namespace of its own).
func containerBindRootsRefused(t *testing.T, image string) {
	if onPodman(t) {
		t.Skip("on Podman: bind roots are refused whatever the namespace, and `docker run --rm` through its API exits 0 whatever the container did")
	}
	// A root the boundary's own checks take (a directory inside a 0700 one), so what refuses
	// the start is the namespace.
	closed := []string{"--mount", "type=tmpfs,destination=/closed,tmpfs-mode=0700", "--mount", "type=bind,source=" + t.TempDir() + ",destination=/closed/root"}
	for _, pid := range [][]string{nil, {"--pid", "host"}} {
		args := append([]string{"run", "--rm", "--net", "host", "-v", engineSocket(t) + ":/var/run/docker.sock"}, pid...)
		args = append(args, closed...)
		args = append(args, image, "run", "--backend", "http://127.0.0.1:9", "--data-dir", "/tmp/data", "--allow-bind-root", "/closed/root", "--log-format", "json")
		out, err := exec.Command("docker", args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--allow-bind-root needs agentd in the ") {
			t.Errorf("docker %s: %v\n%s\nwant a refusal naming --allow-bind-root and the namespace at fault", strings.Join(args, " "), err, tail(string(out), 10))
		}
	}
}
