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
	logs := func(args ...string) (string, string, error) {
		cmd := exec.Command(agentdBinary(t), append([]string{"logs", "--api", api, "task/logs-1"}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		// testbox's last lines: "spewed" on stderr, then its start line on stdout (the engine
		// may log them in either order: it reads the two pipes apart).
		stdout, stderr, err := logs("app")
		if stderr == "testbox: spewed 2 KiB\n" && strings.HasSuffix(stdout, "testbox: [spew 2]\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's last line never showed: %v %q %q\n%s", err, stdout, stderr, a.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	stdout, stderr, err := logs("app")
	if err != nil || !strings.HasPrefix(stdout, "line 00000000 ") || !strings.HasSuffix(stdout, "testbox: [spew 2]\n") ||
		strings.Contains(stdout, "spewed") || stderr != "testbox: spewed 2 KiB\n" {
		t.Fatalf("agentd logs: %v\nstdout %q\nstderr %q", err, stdout[:min(len(stdout), 200)], stderr)
	}
	if stdout, stderr, _ := logs("app", "--tail", "3"); strings.Count(stdout, "\n")+strings.Count(stderr, "\n") != 3 {
		t.Fatalf("--tail 3: stdout %q stderr %q", stdout, stderr)
	}
	if _, _, err := logs("ghost"); err == nil {
		t.Fatal("logs of a container the task does not have succeeded")
	} else if _, stderr, _ := logs("ghost"); !strings.Contains(stderr, "task task/logs-1 has no container ghost") {
		t.Fatalf("logs of an unknown container: %q", stderr)
	}
	// --follow keeps the stream open while the container runs.
	// --tail 2: the engine orders the last stdout and stderr lines by when it read them.
	follow := exec.Command(agentdBinary(t), "logs", "--api", api, "task/logs-1", "app", "--tail", "2", "--follow")
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
	case l := <-line:
		if l != "testbox: [spew 2]" {
			t.Fatalf("--follow printed %q", l)
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
	// Stopping the task ends the container, and with it the followed stream.
	postJSON(t, cpURL+"/v1/tasks/task/logs-1/stop", nil)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("--follow did not end when the container stopped")
	}
	// A bind mount outside the allowed roots (none given here) never runs: the task is
	// STOPPED with a reason naming the field, and no container is made.
	postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": "task/bind-etc",
		"containers": []map[string]any{{"name": "app", "image": "agentd-testbox:latest", "command": []string{"write", "/host/x", "owned"},
			"mounts": []map[string]any{{"type": "bind", "source": "/etc", "target": "/host"}}}}}})
	awaitSettled(t, cpURL, api, 2, 120*time.Second, a.log)
	var bind cpTask
	getJSON(t, cpURL+"/v1/tasks/task/bind-etc", &bind)
	if bind.Status != "STOPPED" || !strings.Contains(bind.Reason, "containers[0].mounts[0].source") || len(bind.Containers) != 0 {
		t.Fatalf("a bind of /etc: %+v; want STOPPED naming mounts[0].source, no container reported", bind)
	}
	if ps := dockerPS(t, "label=io.agentd.task-arn=task/bind-etc"); len(ps) != 0 {
		t.Fatalf("a bind of /etc made containers %v", ps)
	}
	if _, stderr, err := logs("app"); err == nil || !strings.Contains(stderr, "cleaned up") {
		t.Fatalf("logs after cleanup: %v %q; want an error saying the task is cleaned up", err, stderr)
	}
}
