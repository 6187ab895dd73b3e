package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The forensics CLI against a running agent: a locked journal is explained, export --live
// gives a copy that verifies, dump --follow --live streams new records, verify exits 1 on a
// damaged file.
func TestJournalCommandsOnARunningAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	t.Parallel()
	dir := t.TempDir()
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	data := filepath.Join(dir, "data")
	_, api := startAgentProc(t, data, cpURL)
	bin := agentdBinary(t)

	out, err := exec.Command(bin, "journal", "stats", "--data-dir", data).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "locked by another agentd process (pid") || !strings.Contains(string(out), "agentd journal export --live") {
		t.Fatalf("stats on a held journal: %v\n%s", err, out)
	}

	follow := exec.Command(bin, "journal", "dump", "--live", api, "--follow", "--type", "task_added")
	stdout, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = follow.Process.Kill(); _ = follow.Wait() }()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": "agent-e2e", "task": map[string]any{"arn": "task/followed",
		"containers": []map[string]any{{"name": "app", "image": "web:1", "command": []string{"exit", "0"}}}}})
	select {
	case l := <-lines:
		if !strings.Contains(l, "task_added") || !strings.Contains(l, "task/followed") {
			t.Fatalf("follow printed %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dump --follow --live printed nothing for a new task")
	}

	copyPath := filepath.Join(dir, "copy.db")
	if out, err := exec.Command(bin, "journal", "export", "--live", api, "--out", copyPath).CombinedOutput(); err != nil {
		t.Fatalf("export --live: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "journal", "verify", "--file", copyPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "every checksum, sequence and invariant holds") {
		t.Fatalf("verify of the export: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "journal", "timeline", "--file", copyPath, "--task", "task/followed", "--svg", filepath.Join(dir, "t.svg")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "assigned in") {
		t.Fatalf("timeline: %v\n%s", err, out)
	}
	// Damage the copy (every place the ARN stands, free pages included): verify exits 1 and
	// names the record.
	b, _ := os.ReadFile(copyPath)
	n := 0
	for off := 0; ; {
		idx := strings.Index(string(b[off:]), "task/followed")
		if idx < 0 {
			break
		}
		b[off+idx+5] ^= 0x20
		off += idx + 1
		n++
	}
	if n == 0 {
		t.Fatal("the copy does not hold the task's ARN in clear")
	}
	if err := os.WriteFile(copyPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "journal", "verify", "--file", copyPath).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "checksum mismatch") {
		t.Fatalf("verify of a damaged copy: %v\n%s", err, out)
	}
}
