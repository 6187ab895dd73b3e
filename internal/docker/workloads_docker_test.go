package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/bindroot"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
)

// The tests of PROTOCOL.md §4 on the real engine: each asserts what the field does to the
// container (what the kernel, the network or the file system shows), not what was asked.

func startSpec(t *testing.T, e *Engine, task string, spec event.ContainerSpec) string {
	t.Helper()
	ctx := context.Background()
	if spec.Name == "" {
		spec.Name = "app"
	}
	if spec.Image == "" {
		spec.Image = testbox
	}
	id, err := e.Create(ctx, runtime.CreateSpec{Task: task, Container: spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func dockerInspect(t *testing.T, id, format string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", format, id).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	return strings.TrimSpace(string(out))
}

// Docker can emit a container's die before its oom, and an inspect at the die then reads
// OOMKilled false (seen one run in three): the exit stream must hold such an exit for its oom.
// The container over its limit runs five times, without retries, and every exit Docker knows to
// be an OOM kill — it emitted an oom for it, before or after the die — must reach the agent as
// one (the reason the core words from it starts OutOfMemory).
//
// Docker itself sometimes never learns of the kill: the kernel logs it, yet no oom event comes
// and inspect reads OOMKilled false for good (measured here: 1 in 12 runs, containerd's cgroup v1
// OOM watcher dropping the notification of a container that died at once). No agent can see
// that one; the test logs it and requires most runs to be seen as OOM kills.
func TestDockerOOMKillUnderMemoryLimitIsReported(t *testing.T) {
	e, agent := dockerEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	exits, err := e.Exits(ctx, time.Now().Add(-time.Second).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	ooms := dockerOOMs(ctx, e, agent) // Docker's own word, apart from the code under test
	under := startSpec(t, e, "task/fits", event.ContainerSpec{Command: []string{"alloc", "8"}, MemoryMiB: 64})
	seen := 0
	for run := 1; run <= 5; run++ {
		over := startSpec(t, e, fmt.Sprintf("task/oom-%d", run), event.ContainerSpec{Command: []string{"alloc", "256"}, MemoryMiB: 32})
		x := exitEvent(ctx, t, exits, over)
		if x.ExitCode != 137 {
			t.Fatalf("run %d: 256 MiB under a 32 MiB limit: exit event %+v; want 137", run, x)
		}
		if x.OOMKilled {
			seen++
			continue
		}
		select {
		case <-ooms(over):
			t.Fatalf("run %d: Docker emitted an oom for %s, but the exit stream reported a plain exit 137: %+v", run, over, x)
		case <-time.After(5 * time.Second):
			t.Logf("run %d: Docker never emitted an oom for %s (exit 137, OOMKilled false): an OOM kill Docker lost", run, over)
		}
	}
	if seen < 3 {
		t.Fatalf("only %d of 5 runs over the memory limit reported as OOM kills", seen)
	}
	if st, _ := e.Inspect(ctx, under); !st.Running || st.OOMKilled {
		t.Fatalf("8 MiB under a 64 MiB limit: %+v; want running", st)
	}
}

// dockerOOMs subscribes to Docker's oom events of the agent's containers; the function it
// returns gives a channel closed once an oom of that container was seen.
func dockerOOMs(ctx context.Context, e *Engine, agent string) func(id string) <-chan struct{} {
	f := client.Filters{}.Add("type", "container").Add("event", "oom").Add("label", runtime.LabelAgent+"="+agent)
	res := e.cli.Events(ctx, client.EventsListOptions{Filters: f})
	var mu sync.Mutex
	seen := map[string]chan struct{}{}
	ch := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if seen[id] == nil {
			seen[id] = make(chan struct{})
		}
		return seen[id]
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-res.Err:
				return
			case m, ok := <-res.Messages:
				if !ok {
					return
				}
				c := ch(m.Actor.ID)
				select {
				case <-c:
				default:
					close(c)
				}
			}
		}
	}()
	return func(id string) <-chan struct{} { return ch(id) }
}

// exitEvent waits for the exit event of one container (others are skipped), while ctx lasts.
func exitEvent(ctx context.Context, t *testing.T, exits <-chan runtime.Exit, id string) runtime.Exit {
	t.Helper()
	for {
		select {
		case x, ok := <-exits:
			if !ok {
				t.Fatalf("the exit stream ended before %s exited", id)
			}
			if x.ID == id {
				return x
			}
		case <-ctx.Done():
			t.Fatalf("no exit event for %s", id)
		}
	}
}

func TestDockerResourceLimitsReachTheKernel(t *testing.T) {
	e, _ := dockerEngine(t)
	id := startSpec(t, e, "task/limits", event.ContainerSpec{CPUShares: 512, MemoryMiB: 64, MemoryReservationMiB: 32, PidsLimit: 40})
	info, _, err := e.inspect(context.Background(), id)
	if err != nil || info.State == nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	// The process's own cgroups, wherever the engine put them (Docker: docker/<id>; Podman:
	// libpod_parent/libpod-<id>).
	cgroups, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", info.State.Pid))
	if err != nil {
		t.Fatal(err)
	}
	path := func(ctrl, file string) string {
		for _, line := range strings.Split(string(cgroups), "\n") {
			// hierarchy-ID:controller-list:cgroup-path
			if f := strings.SplitN(line, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), ctrl) {
				return filepath.Join("/sys/fs/cgroup", ctrl, f[2], file)
			}
		}
		t.Skipf("no cgroup v1 %s controller for the container's process:\n%s", ctrl, cgroups)
		return ""
	}
	read := func(ctrl, file string) string {
		b, err := os.ReadFile(path(ctrl, file))
		if err != nil {
			t.Skipf("cgroup v1 files not where the container's process says: %v", err)
		}
		return strings.TrimSpace(string(b))
	}
	for _, c := range []struct{ ctrl, file, want string }{
		{"cpu", "cpu.shares", "512"},
		{"memory", "memory.limit_in_bytes", fmt.Sprint(64 << 20)},
		{"memory", "memory.memsw.limit_in_bytes", fmt.Sprint(64 << 20)}, // no swap beyond the limit
		{"memory", "memory.soft_limit_in_bytes", fmt.Sprint(32 << 20)},
		{"pids", "pids.max", "40"},
	} {
		if _, err := os.Stat(path(c.ctrl, c.file)); err != nil && c.file == "memory.memsw.limit_in_bytes" {
			continue // swap accounting is off on this kernel
		}
		if got := read(c.ctrl, c.file); got != c.want {
			t.Errorf("%s/%s = %s; want %s", c.ctrl, c.file, got, c.want)
		}
	}
}

// freePort finds a port nobody listens on now (closed again before use).
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond) // the server inside is still starting
	}
}

func TestDockerPublishedPortAnswersOnTheReportedHostPort(t *testing.T) {
	e, _ := dockerEngine(t)
	ctx := context.Background()
	fixed := freePort(t)
	id := startSpec(t, e, "task/ports", event.ContainerSpec{Command: []string{"serve", "8080"}, Ports: []event.PortMapping{
		{ContainerPort: 8080, HostPort: 0, Protocol: "tcp", HostIP: "127.0.0.1"},
		{ContainerPort: 8080, HostPort: fixed, Protocol: "tcp", HostIP: "127.0.0.1"},
	}})
	st, err := e.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Bindings) != 2 {
		t.Fatalf("bindings %+v; want two", st.Bindings)
	}
	var picked int
	for _, b := range st.Bindings {
		if b.ContainerPort != 8080 || b.Protocol != "tcp" || b.HostIP != "127.0.0.1" || b.HostPort == 0 {
			t.Fatalf("binding %+v", b)
		}
		if b.HostPort != fixed {
			picked = b.HostPort
		}
	}
	if picked == 0 {
		t.Fatalf("bindings %+v: no engine-picked port beside %d", st.Bindings, fixed)
	}
	host := dockerInspect(t, id, "{{.Config.Hostname}}")
	for _, port := range []int{picked, fixed} {
		code, body := getBody(t, fmt.Sprintf("http://127.0.0.1:%d/", port))
		if code != 200 || body != "testbox "+host+"\n" {
			t.Fatalf("GET on reported host port %d: %d %q; want this container's answer", port, code, body)
		}
	}
	// After a stop nothing is bound, and nothing answers.
	if err := e.Stop(ctx, id, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.Inspect(ctx, id); len(st.Bindings) != 0 {
		t.Fatalf("stopped container reports bindings %+v", st.Bindings)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", picked), time.Second); err == nil {
		c.Close()
		t.Fatalf("port %d still answers after the stop", picked)
	}
}

func TestDockerBindMountWritesReachTheHostOnlyUnderAllowedRoots(t *testing.T) {
	e, _ := dockerEngine(t)
	differsOnPodman(t, e, "--allow-bind-root is refused (TestDockerBindRootsAreRefusedOnPodman)")
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o777) // the container writes as uid 1234
	roots, err := bindroot.Open([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	defer roots.Close()
	must(t, e.SetBindRoots(roots))
	rules, err := protocol.NewRules(roots.Names())
	if err != nil {
		t.Fatal(err)
	}
	task := func(src string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"arn":"task/bind","desired_status":"RUNNING","containers":[{"name":"app","image":%q,
			"command":["write","out.txt","written inside"],"working_dir":"/data","user":"1234:5678",
			"mounts":[{"type":"bind","source":%q,"target":"/data"}]}]}`, testbox, src))
	}
	// Outside the allowed roots: invalid at arrival, never reaches the engine.
	for _, src := range []string{"/etc", root + "x", root + "/../etc"} {
		if d := rules.DecodeTask(task(src)); !strings.Contains(d.Invalid, "containers[0].mounts[0].source") {
			t.Fatalf("bind of %s: %q; want refused naming the field", src, d.Invalid)
		}
	}
	d := rules.DecodeTask(task(dir))
	if d.Invalid != "" {
		t.Fatalf("bind under the allowed root refused: %s", d.Invalid)
	}
	id := startSpec(t, e, "task/bind", d.Task.Spec()[0])
	if st := waitExit(t, e, id); st.ExitCode != 0 {
		t.Fatalf("write into the bind mount exited %d", st.ExitCode)
	}
	// working_dir made the relative path land in /data; user made the file the uid's.
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if err != nil || string(b) != "written inside" {
		t.Fatalf("file written inside, read on the host: %q %v", b, err)
	}
	fi, _ := os.Stat(filepath.Join(dir, "out.txt"))
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1234 || st.Gid != 5678 {
		t.Fatalf("file owned by %d:%d; want 1234:5678 (user)", st.Uid, st.Gid)
	}
	// read_only: the same write fails.
	ro := d.Task.Spec()[0]
	ro.Name, ro.Mounts[0].ReadOnly = "ro", true
	ro.Command = []string{"write", "ro.txt", "x"}
	if st := waitExit(t, e, startSpec(t, e, "task/bind", ro)); st.ExitCode == 0 {
		t.Fatal("a write into a read-only bind mount succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "ro.txt")); err == nil {
		t.Fatal("a read-only bind mount was written")
	}
}

func TestDockerVolumeAndTmpfsMounts(t *testing.T) {
	e, agent := dockerEngine(t)
	vol := "agentd-test-" + strings.ReplaceAll(agent, "_", "-")
	t.Cleanup(func() {
		removeAgentContainers(t, agent) // a volume in use cannot be removed
		_ = exec.Command("docker", "volume", "rm", "-f", vol).Run()
	})
	id := startSpec(t, e, "task/vol", event.ContainerSpec{Command: []string{"write", "/cache/f", "in the volume"},
		Mounts: []event.Mount{{Type: event.MountVolume, Source: vol, Target: "/cache"}}})
	if st := waitExit(t, e, id); st.ExitCode != 0 {
		t.Fatalf("write into the volume exited %d", st.ExitCode)
	}
	out, err := exec.Command("docker", "volume", "inspect", "-f", "{{.Mountpoint}}", vol).Output()
	if err != nil {
		t.Fatalf("volume %s was not made: %v", vol, err)
	}
	if b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "f")); err != nil || string(b) != "in the volume" {
		t.Fatalf("file in the volume: %q %v", b, err)
	}
	// The image has no /scratch: only the tmpfs makes it a writable directory.
	id = startSpec(t, e, "task/tmpfs", event.ContainerSpec{Command: []string{"write", "/scratch/f", "x"},
		Mounts: []event.Mount{{Type: event.MountTmpfs, Target: "/scratch", SizeMiB: 1}}})
	if st := waitExit(t, e, id); st.ExitCode != 0 {
		t.Fatalf("write into the tmpfs exited %d", st.ExitCode)
	}
	if !onPodman(e) { // Podman's inspect has no HostConfig.Mounts (the write above is the proof there)
		if got := dockerInspect(t, id, `{{index .HostConfig.Mounts 0 | json}}`); !strings.Contains(got, `"SizeBytes":1048576`) {
			t.Fatalf("tmpfs mount %s", got)
		}
	}
	id = startSpec(t, e, "task/notmpfs", event.ContainerSpec{Command: []string{"write", "/scratch/f", "x"}})
	if st := waitExit(t, e, id); st.ExitCode == 0 {
		t.Fatal("without the tmpfs the write succeeded: the test proves nothing")
	}
}

// waitLog waits until the container has written want (so its signal handlers are set).
func waitLog(t *testing.T, e *Engine, id, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rc, err := e.Logs(context.Background(), id, runtime.LogOptions{Tail: -1})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		_, _ = stdcopy.StdCopy(&out, &out, rc)
		rc.Close()
		if strings.Contains(out.String(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never wrote %q: %q", id, want, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDockerHealthTurnsHealthyThenUnhealthy(t *testing.T) {
	e, _ := dockerEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	changes, err := e.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := startSpec(t, e, "task/health", event.ContainerSpec{Command: []string{"serve", "8080"},
		Ports:       []event.PortMapping{{ContainerPort: 8080, HostIP: "127.0.0.1"}},
		HealthCheck: &event.HealthCheck{Command: []string{"CMD", "/testbox", "probe", "8080"}, IntervalS: 1, TimeoutS: 5, Retries: 2}})
	await := func(ch <-chan runtime.HealthChange, want event.Health) {
		t.Helper()
		for {
			select {
			case h, ok := <-ch:
				if !ok {
					t.Fatalf("health stream ended waiting for %s", want)
				}
				if h.ID == id && h.Health == want {
					if h.Task != "task/health" || h.Container != "app" {
						t.Fatalf("health change lacks its labels: %+v", h)
					}
					return
				}
			case <-ctx.Done():
				t.Fatalf("%s never turned %s", id, want)
			}
		}
	}
	await(changes, event.HealthHealthy)
	if st, _ := e.Inspect(ctx, id); st.Health != event.HealthHealthy {
		t.Fatalf("inspect after HEALTHY: %+v", st)
	}
	// A new subscription starts with the current verdict: no cursor needed.
	again, _ := e.Health(ctx)
	await(again, event.HealthHealthy)
	st, _ := e.Inspect(ctx, id)
	if code, _ := getBody(t, fmt.Sprintf("http://127.0.0.1:%d/sick", st.Bindings[0].HostPort)); code != 200 {
		t.Fatalf("GET /sick: %d", code)
	}
	await(changes, event.HealthUnhealthy)
	if st, _ := e.Inspect(ctx, id); st.Health != event.HealthUnhealthy {
		t.Fatalf("inspect after UNHEALTHY: %+v", st)
	}
}

func TestDockerLogFilesRotateAtTheConfiguredSize(t *testing.T) {
	e, _ := dockerEngine(t)
	differsOnPodman(t, e, "max-file is not kept: one log file, truncated at max-size")
	id := startSpec(t, e, "task/logs", event.ContainerSpec{Command: []string{"spew", "3072"}, Log: &event.LogConfig{MaxSizeMiB: 1, MaxFiles: 2}})
	waitLog(t, e, id, "testbox: [spew 3072]") // its last stdout line: all of stdout is logged
	logPath := dockerInspect(t, id, "{{.LogPath}}")
	files, _ := filepath.Glob(logPath + "*")
	if len(files) != 2 {
		t.Fatalf("log files %v; want 2 (max_files), rotated", files)
	}
	var total int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		// json-file rotates once a file passes max-size: at most one line over.
		if fi.Size() > 1<<20+4096 {
			t.Fatalf("%s is %d bytes; want at most 1 MiB (max_size_mib)", f, fi.Size())
		}
		total += fi.Size()
	}
	if total >= 3<<20 {
		t.Fatalf("%d bytes of logs kept for 3 MiB written: nothing was dropped", total)
	}
	// Without log settings the agent's default applies: json-file, 10 MiB × 3.
	plain := startSpec(t, e, "task/logs-default", event.ContainerSpec{})
	if got := dockerInspect(t, plain, "{{.HostConfig.LogConfig.Type}} {{index .HostConfig.LogConfig.Config \"max-size\"}} {{index .HostConfig.LogConfig.Config \"max-file\"}}"); got != "json-file 10m 3" {
		t.Fatalf("default log config %q; want json-file 10m 3", got)
	}
}

func TestDockerLogsAreDemultiplexedAndTailed(t *testing.T) {
	e, _ := dockerEngine(t)
	id := startSpec(t, e, "task/logs", event.ContainerSpec{Command: []string{"spew", "1"}})
	waitLog(t, e, id, "testbox: [spew 1]") // the engine reads stdout and stderr apart: wait for both
	waitLog(t, e, id, "spewed 1 KiB")
	rc, err := e.Logs(context.Background(), id, runtime.LogOptions{Tail: -1})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errOut, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if !strings.HasPrefix(out.String(), "line 00000000 ") || strings.Contains(out.String(), "spewed") {
		t.Fatalf("stdout %q", out.String()[:min(out.Len(), 200)])
	}
	if errOut.String() != "testbox: spewed 1 KiB\n" {
		t.Fatalf("stderr %q", errOut.String())
	}
	rc, _ = e.Logs(context.Background(), id, runtime.LogOptions{Tail: 2})
	out.Reset()
	errOut.Reset()
	_, _ = stdcopy.StdCopy(&out, &errOut, rc)
	rc.Close()
	if n := strings.Count(out.String(), "\n") + strings.Count(errOut.String(), "\n"); n != 2 {
		t.Fatalf("tail 2 gave %d lines: %q %q", n, out.String(), errOut.String())
	}
}

func TestDockerEntrypointAndLabels(t *testing.T) {
	e, agent := dockerEngine(t)
	// The image's entrypoint is /testbox; a task's entrypoint replaces it, the command follows.
	id := startSpec(t, e, "task/ep", event.ContainerSpec{Entrypoint: []string{"/testbox", "exit"}, Command: []string{"7"},
		Labels: map[string]string{"team": "payments", runtime.LabelAgent: "forged"}})
	if st := waitExit(t, e, id); st.ExitCode != 7 {
		t.Fatalf("entrypoint [/testbox exit] with command [7] exited %d", st.ExitCode)
	}
	if got := dockerInspect(t, id, `{{index .Config.Labels "team"}} {{index .Config.Labels "`+runtime.LabelAgent+`"}}`); got != "payments "+agent {
		t.Fatalf("labels %q; want the task's label and agentd's own, unforged", got)
	}
}

func TestDockerPullPolicy(t *testing.T) {
	e, _ := dockerEngineWith(t, PullConfig{Tries: 2, RetryInitial: 10 * time.Millisecond, InactivityTimeout: 20 * time.Second})
	differsOnPodman(t, e, "a short name is pulled from the search registries, and a local image's digest is a repo digest, not its id")
	ctx := context.Background()
	// The test image exists only on this engine, in no registry it can reach: "always" must
	// go to the registry and so fails — for good, or, the registry being unreachable, by
	// falling back to the image it has and saying so — where "if-not-present" and "never"
	// find it without a word.
	if out, err := e.PullImage(ctx, testbox, event.PullAlways); err == nil && (out.Note == "" || out.Pulled) {
		t.Fatalf("pull_policy always did not go to the registry for a local-only image: %+v", out)
	} else {
		t.Logf("always of a local-only image: %+v, %v", out, err)
	}
	for _, p := range []string{"", event.PullIfNotPresent, event.PullNever} {
		out, err := e.PullImage(ctx, testbox, p)
		if err != nil || out.Pulled || out.Note != "" || out.ImageID == "" || out.Digest != out.ImageID {
			t.Fatalf("pull_policy %q of a present image: %+v, %v; want it as it is (a local image's digest is its id)", p, out, err)
		}
	}
	if _, err := e.PullImage(ctx, "agentd-test/absent:1", event.PullNever); err == nil || !strings.Contains(err.Error(), "not present, and pull_policy is never") {
		t.Fatalf("pull_policy never of an absent image: %v", err)
	}
}
