//go:build linux

package benchmark

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// An agent of a fleet run as processes yields the CPU to the bench's control plane (nice 19),
// which stands for a machine of its own: at equal priority 200 agent processes starved it and
// the payloads of one moment reached the fleet over 2.4 s. The test runs RunFleetAgent in a
// child (the test binary again) and reads the child's nice from /proc/self/stat.
func TestFleetAgentProcessYieldsTheCPU(t *testing.T) {
	if os.Getenv("AGENTD_FLEET_AGENT_CHILD") != "" {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the priority is set first; the agent itself need not run
		_ = RunFleetAgent(ctx, FleetAgentOptions{Backend: "http://127.0.0.1:1", AgentID: "a", Dir: t.TempDir()}, io.Discard)
		stat, err := os.ReadFile("/proc/self/stat")
		if err != nil {
			t.Fatal(err)
		}
		// After the command's name in parentheses, field 19 (nice) is the 17th.
		t.Logf("nice %s", strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))[16])
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFleetAgentProcessYieldsTheCPU$", "-test.v")
	cmd.Env = append(os.Environ(), "AGENTD_FLEET_AGENT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "nice 19\n") {
		t.Fatalf("the fleet agent's process kept its CPU priority (want nice 19):\n%s", out)
	}
}
