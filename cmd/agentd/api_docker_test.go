package main

import (
	"bytes"
	"cmp"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDockerIdleFollowIsEnded: `agentd logs --follow` of a real container that writes nothing
// more is ended by the agent at --api-follow-idle (the engine's log stream ends with the
// request), and says so instead of ending as if the container had.
func TestDockerIdleFollowIsEnded(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	agentID := strings.ReplaceAll("agent-idlefollow-"+time.Now().Format("150405.000"), ".", "")
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + agentID) })
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	a := startProc(t, "run", "--runtime", "docker", "--data-dir", t.TempDir(), "--backend", cpURL, "--listen", "127.0.0.1:0",
		"--log-format", "json", "--agent-id", agentID, "--api-follow-idle", "2s")
	api := "http://" + a.await(t, "agent running", 60*time.Second)["listen"].(string)
	postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": "task/quiet",
		"containers": []map[string]any{{"name": "app", "image": cmp.Or(os.Getenv("AGENTD_TESTBOX_IMAGE"), "agentd-testbox:latest"), "command": []string{"run"}}}}})
	awaitKnown(t, api, "task/quiet", "RUNNING", 60*time.Second)
	follow := exec.Command(agentdBinary(t), "logs", "--api", api, "task/quiet", "app", "--follow")
	var out, errOut bytes.Buffer
	follow.Stdout, follow.Stderr = &out, &errOut
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- follow.Wait() }()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(errOut.String(), "the agent ended the follow at its idle limit 2s") {
			t.Fatalf("agentd logs --follow ended: %v\nstdout %q\nstderr %q; want it to say the idle limit ended it", err, out.String(), errOut.String())
		}
	case <-time.After(60 * time.Second):
		_ = follow.Process.Kill()
		t.Fatal("a follow of a quiet container was not ended within 60 s (idle limit 2s)")
	}
}
