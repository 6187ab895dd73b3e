//go:build linux

package benchmark

import (
	"context"
	"io"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// An agent of a fleet run as processes yields the CPU to the bench's control plane (nice 19),
// which stands for a machine of its own: at equal priority 200 agent processes starved it and
// the payloads of one moment reached the fleet over 2.4 s. The test runs RunFleetAgent in a
// child (the test binary again) and reads the nice of every one of the child's threads: a nice
// is a thread's on Linux, and with only the calling thread's set the others kept 0 (the main
// thread's 0 seen in make test-race).
func TestFleetAgentProcessYieldsTheCPU(t *testing.T) {
	if os.Getenv("AGENTD_FLEET_AGENT_CHILD") != "" {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the priority is set first; the agent itself need not run
		_ = RunFleetAgent(ctx, FleetAgentOptions{Backend: "http://127.0.0.1:1", AgentID: "a", Dir: t.TempDir()}, io.Discard)
		nices, err := threadNices()
		if err != nil {
			t.Fatal(err)
		}
		for tid, nice := range nices {
			t.Logf("thread %d nice %d", tid, nice)
		}
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
	threads := regexp.MustCompile(`thread \d+ nice (-?\d+)`).FindAllStringSubmatch(string(out), -1)
	if len(threads) == 0 {
		t.Fatalf("the child named no thread's nice:\n%s", out)
	}
	for _, th := range threads {
		if th[1] != "19" {
			t.Fatalf("a thread of the fleet agent's process kept its CPU priority (want nice 19 in every one):\n%s", out)
		}
	}
}
