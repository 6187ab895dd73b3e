package main

import (
	"bufio"
	"bytes"
	"cmp"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDockerLogsCommand runs `agentd run --runtime docker` and reads a container's logs with
// `agentd logs`: stdout to stdout, stderr to stderr, --tail, --follow, and a clear error for a
// container the task does not have. A task asking to bind-mount /etc never runs.
func TestDockerLogsCommand(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	agentID := strings.ReplaceAll("agent-dockerlogs-"+time.Now().Format("150405.000"), ".", "")
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + agentID) })
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	a := startProc(t, "run", "--runtime", "docker", "--data-dir", t.TempDir(), "--backend", cpURL,
		"--listen", "127.0.0.1:0", "--cleanup-wait", "1s", "--log-format", "json", "--agent-id", agentID)
	api := "http://" + a.await(t, "agent running", 60*time.Second)["listen"].(string)
	postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": "task/logs-1",
		"containers": []map[string]any{{"name": "app", "image": cmp.Or(os.Getenv("AGENTD_TESTBOX_IMAGE"), "agentd-testbox:latest"), "command": []string{"spew", "2"}}}}})
	logs := taskLogs{bin: agentdBinary(t), api: api, arn: "task/logs-1"}

	logs.awaitLastLine(t, a)
	logs.splitsStdoutFromStderr(t)
	logs.tailsAndNamesAnUnknownContainer(t)
	logs.followsUntilTheContainerStops(t, func() { postJSON(t, cpURL+"/v1/tasks/task/logs-1/stop", nil) })
	bindOfEtcNeverRuns(t, cpURL, agentID)
	awaitSettled(t, cpURL, api, 2, 120*time.Second, a.log)
	bindOfEtcStoppedNamingTheField(t, cpURL)
	if _, stderr, err := logs.read("app"); err == nil || !strings.Contains(stderr, "cleaned up") {
		t.Fatalf("logs after cleanup: %v %q; want an error saying the task is cleaned up", err, stderr)
	}
}

// taskLogs runs `agentd logs` against the agent for one task.
type taskLogs struct{ bin, api, arn string }

func (l taskLogs) read(args ...string) (string, string, error) {
	cmd := exec.Command(l.bin, append([]string{"logs", "--api", l.api, l.arn}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// awaitLastLine waits for testbox's last lines: "spewed" on stderr, then its start line on
// stdout (the engine may log them in either order: it reads the two pipes apart).
func (l taskLogs) awaitLastLine(t *testing.T, agent *proc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		stdout, stderr, err := l.read("app")
		if stderr == "testbox: spewed 2 KiB\n" && strings.HasSuffix(stdout, "testbox: [spew 2]\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's last line never showed: %v %q %q\n%s", err, stdout, stderr, agent.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// splitsStdoutFromStderr: stdout goes to stdout from its first line, stderr to stderr.
func (l taskLogs) splitsStdoutFromStderr(t *testing.T) {
	t.Helper()
	stdout, stderr, err := l.read("app")
	if err != nil || !strings.HasPrefix(stdout, "line 00000000 ") || !strings.HasSuffix(stdout, "testbox: [spew 2]\n") ||
		strings.Contains(stdout, "spewed") || stderr != "testbox: spewed 2 KiB\n" {
		t.Fatalf("agentd logs: %v\nstdout %q\nstderr %q", err, stdout[:min(len(stdout), 200)], stderr)
	}
}

// tailsAndNamesAnUnknownContainer: --tail 3 prints three lines; a container the task does not
// have fails, naming it.
func (l taskLogs) tailsAndNamesAnUnknownContainer(t *testing.T) {
	t.Helper()
	if stdout, stderr, _ := l.read("app", "--tail", "3"); strings.Count(stdout, "\n")+strings.Count(stderr, "\n") != 3 {
		t.Fatalf("--tail 3: stdout %q stderr %q", stdout, stderr)
	}
	if _, _, err := l.read("ghost"); err == nil {
		t.Fatal("logs of a container the task does not have succeeded")
	} else if _, stderr, _ := l.read("ghost"); !strings.Contains(stderr, "task task/logs-1 has no container ghost") {
		t.Fatalf("logs of an unknown container: %q", stderr)
	}
}

// followsUntilTheContainerStops: --follow keeps the stream open while the container runs,
// and stopping the task ends the container and with it the followed stream.
func (l taskLogs) followsUntilTheContainerStops(t *testing.T, stopTask func()) {
	t.Helper()
	// --tail 2: the engine orders the last stdout and stderr lines by when it read them.
	follow := exec.Command(l.bin, "logs", "--api", l.api, l.arn, "app", "--tail", "2", "--follow")
	pipe, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = follow.Process.Kill(); _ = follow.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "testbox:") {
				line <- sc.Text()
				break
			}
		}
		close(line)
		_, _ = io.Copy(io.Discard, pipe)
	}()
	select {
	case got := <-line:
		if got != "testbox: [spew 2]" {
			t.Fatalf("--follow printed %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("--follow printed nothing")
	}
	exited := make(chan error, 1)
	go func() { exited <- follow.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("--follow returned while the container runs: %v", err)
	case <-time.After(500 * time.Millisecond): // still following: what we want to see
	}
	stopTask()
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("--follow did not end when the container stopped")
	}
}

// bindOfEtcNeverRuns assigns a task binding /etc, outside the allowed roots (none given).
func bindOfEtcNeverRuns(t *testing.T, cpURL, agentID string) {
	t.Helper()
	postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": "task/bind-etc",
		"containers": []map[string]any{{"name": "app", "image": "agentd-testbox:latest", "command": []string{"write", "/host/x", "owned"},
			"mounts": []map[string]any{{"type": "bind", "source": "/etc", "target": "/host"}}}}}})
}

// bindOfEtcStoppedNamingTheField: the task binding /etc is STOPPED with a reason naming the
// field, and no container is made.
func bindOfEtcStoppedNamingTheField(t *testing.T, cpURL string) {
	t.Helper()
	var bind cpTask
	getJSON(t, cpURL+"/v1/tasks/task/bind-etc", &bind)
	if bind.Status != "STOPPED" || !strings.Contains(bind.Reason, "containers[0].mounts[0].source") || len(bind.Containers) != 0 {
		t.Fatalf("a bind of /etc: %+v; want STOPPED naming mounts[0].source, no container reported", bind)
	}
	if ps := dockerPS(t, "label=io.agentd.task-arn=task/bind-etc"); len(ps) != 0 {
		t.Fatalf("a bind of /etc made containers %v", ps)
	}
}
