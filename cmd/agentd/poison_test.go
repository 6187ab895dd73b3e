package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

// Poison payloads through the real binary and the reference control plane (PROTOCOL.md 1.1):
// a task whose ARN is 40 KB (over bbolt's key limit: before the ARN rule no commit holding it
// could succeed, so its payload was never acknowledged and every payload behind it waited), a
// task whose desired_status is 3.5 MB (before, quoted whole into its rejection reason, which
// made a report the control plane refused, and oldest-first reporting stalled every other
// task), an ARN with a newline, and an env name "PATH=/evil:". Each payload stands before a
// good task's. The good tasks run and are cleaned; the invalid ones are reported STOPPED with
// a reason within 1 KiB; the bad-ARN ones are skipped; the control plane sees no violation.
func TestPoisonPayloadsStallNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	t.Parallel()
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	a, api := startAgentProc(t, filepath.Join(t.TempDir(), "data"), cpURL)
	container := func(env map[string]string) []map[string]any {
		return []map[string]any{{"name": "app", "image": "web:1", "command": []string{"exit", "0"}, "env": env}}
	}
	assign := func(task map[string]any) {
		postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": "agent-e2e", "task": task})
	}
	assign(map[string]any{"arn": "task/" + strings.Repeat("a", 40<<10), "containers": container(nil)})
	assign(map[string]any{"arn": "task/good-1", "containers": container(nil)})
	assign(map[string]any{"arn": "task/poison-status", "desired_status": strings.Repeat("X", 3500<<10), "containers": container(nil)})
	assign(map[string]any{"arn": "task/good-2", "containers": container(nil)})
	assign(map[string]any{"arn": "task/nl\nforged", "containers": container(nil)})
	assign(map[string]any{"arn": "task/poison-env", "containers": container(map[string]string{"PATH=/evil:": "x"})})
	assign(map[string]any{"arn": "task/good-3", "containers": container(nil)})

	deadline := time.Now().Add(60 * time.Second)
	for {
		var view struct{ Tasks []cpTask }
		getJSON(t, cpURL+"/v1/tasks", &view)
		got := map[string]cpTask{}
		for _, task := range view.Tasks {
			got[task.ARN] = task
		}
		var live struct{ Tasks []struct{ ARN string } }
		getJSON(t, api+"/v1/tasks", &live)
		done := len(live.Tasks) == 0
		for _, arn := range []string{"task/good-1", "task/good-2", "task/good-3", "task/poison-status", "task/poison-env"} {
			done = done && got[arn].Status == "STOPPED"
		}
		if done {
			for _, arn := range []string{"task/poison-status", "task/poison-env"} {
				r := got[arn].Reason
				if len(r) > protocol.MaxReasonBytes || r == "" {
					t.Errorf("%s: reason of %d bytes: %.200q", arn, len(r), r)
				}
			}
			if !strings.Contains(got["task/poison-env"].Reason, "env") || !strings.Contains(got["task/poison-status"].Reason, "desired_status") {
				t.Errorf("reasons do not name the field: %q / %.200q", got["task/poison-env"].Reason, got["task/poison-status"].Reason)
			}
			for _, arn := range []string{"task/good-1", "task/good-2", "task/good-3"} {
				if c := got[arn].Containers["app"]; c.ExitCode == nil || *c.ExitCode != 0 {
					t.Errorf("%s did not run to its exit: %+v", arn, got[arn])
				}
			}
			for arn, task := range got {
				if (strings.HasPrefix(arn, "task/aaaa") || strings.Contains(arn, "\n")) && task.Status != "" {
					t.Errorf("a task with a bad ARN was reported: %.40q %s", arn, task.Status)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled in 60 s: %d tasks at the control plane, %d live at the agent\n%.4000s", len(got), len(live.Tasks), a.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	noViolations(t, cpURL)
}
