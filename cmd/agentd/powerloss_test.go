package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/lazyfs"
)

// The power-loss loop (make test-powerloss): the real agent with its data directory on a lazy
// file system (internal/lazyfs), a stream of tasks from a throttled, faulty control plane, and
// the power cut at random moments — the agent killed and everything it wrote but did not sync
// dropped, as a host losing power drops its page cache — then started again. After every cut
// the journal verifies and holds at least every record the last cut's did (no fresh journal,
// nothing durable lost); at the end every task is STOPPED at the control plane and cleaned,
// and the control plane saw no protocol violation (a change re-reported, a status moved back:
// what an agent that lost acknowledged records would do), nor a task cleaned before its
// STOPPED was acknowledged (journal verify's rule). The simulated engine keeps its file off
// the mount, so after every cut each removal and start it made has its cause in the journal
// (powerloss_effects_test.go).
func TestPowerLossLoop(t *testing.T) {
	if os.Getenv("AGENTD_POWERLOSS") != "1" {
		t.Skip("the power-loss loop: run with make test-powerloss")
	}
	if err := lazyfs.Available(); err != nil {
		t.Skipf("the power-loss loop needs FUSE: %v", err)
	}
	cuts := 200
	if n, err := strconv.Atoi(os.Getenv("AGENTD_POWERLOSS_CUTS")); err == nil && n > 0 {
		cuts = n
	}
	began := time.Now()
	backing, mnt := t.TempDir(), t.TempDir()
	fsys, err := lazyfs.Mount(backing, mnt, lazyfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() }) // after the agent's own cleanup kills it (cleanups run last first)
	data := filepath.Join(mnt, "data")
	simDir := t.TempDir() // the engine's own store: off the mount, a cut leaves what it did
	effects := newRuntimeEffects(simDir)
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--throttle-rps", "8", "--throttle-burst", "4", "--fail-rate", "0.05", "--drop-rate", "0.05", "--resend-acked")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	agent, api := startAgentProc(t, data, cpURL, "--sim-dir", simDir)

	rng := rand.New(rand.NewPCG(44, 44))
	var runners []string
	next, stopped, lost := 0, 0, 0
	assign := func() {
		arn := fmt.Sprintf("task/pl-%03d", next)
		cmd := []string{"sleep", fmt.Sprintf("%dms", 100+rng.IntN(800)), fmt.Sprint(next % 3)}
		if next%5 == 0 {
			cmd = []string{"run"}
			runners = append(runners, arn)
		}
		postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": "agent-e2e",
			"task": map[string]any{"arn": arn, "containers": []map[string]any{{"name": "app", "image": "web:1", "command": cmd}}}})
		next++
	}
	var lastSeq uint64
	for k := 0; k < cuts; k++ {
		assign()
		for ; stopped < len(runners)-2; stopped++ { // the control plane stops the long runners along the way
			postJSON(t, cpURL+"/v1/tasks/"+runners[stopped]+"/stop", nil)
		}
		time.Sleep(time.Duration(50+rng.IntN(400)) * time.Millisecond) // a random moment under load
		agent.kill()
		n, err := fsys.PowerCut()
		if err != nil {
			t.Fatalf("power cut %d: %v", k+1, err)
		}
		lost += n
		effects.check(t, data, k+1) // first: the most telling message when a commit was not durable
		seq := verifyDurable(t, data, k+1)
		if seq < lastSeq {
			t.Fatalf("power cut %d: the journal ends at record %d, but %d were durable after the cut before", k+1, seq, lastSeq)
		}
		lastSeq = seq
		agent, api = startAgentProc(t, data, cpURL, "--sim-dir", simDir)
	}
	for ; stopped < len(runners); stopped++ {
		postJSON(t, cpURL+"/v1/tasks/"+runners[stopped]+"/stop", nil)
	}
	awaitSettled(t, cpURL, api, next, 180*time.Second, agent.log)
	noViolations(t, cpURL)
	agent.kill()
	if _, err := fsys.PowerCut(); err != nil {
		t.Fatal(err)
	}
	effects.check(t, data, cuts+1)
	verifyDurable(t, data, cuts+1)
	if effects.removals == 0 || effects.starts == 0 {
		t.Fatalf("the runtime removed %d containers and started %d: the effects check checked nothing", effects.removals, effects.starts)
	}
	t.Logf("%d power cuts under %d tasks in %v: %d unsynced operations dropped; every journal verified, nothing acknowledged lost, no violation; "+
		"%d removals and %d starts of the runtime each found their cause in the journal after every cut (%d of %d containers created were removed unseen)",
		cuts+1, next, time.Since(began).Round(time.Second), lost, effects.removals, effects.starts, effects.unlearnt, effects.created)
}

// verifyDurable runs `agentd journal verify` on what a power cut left (in a process of its own:
// this one serves the mount, and must not map a file on it) and returns the last record's
// sequence number.
func verifyDurable(t *testing.T, dataDir string, cut int) uint64 {
	t.Helper()
	out, err := exec.Command(agentdBinary(t), "journal", "verify", "--json", "--data-dir", dataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("after power cut %d, journal verify: %v\n%s", cut, err, out)
	}
	var rep struct {
		LastSeq uint64 `json:"last_seq"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("after power cut %d, journal verify --json: %v\n%s", cut, err, out)
	}
	return rep.LastSeq
}
