package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/benchmark"
	"github.com/agentd/agentd/internal/controlplane"
)

// A fleet whose agents are processes of their own (this binary, fleet-agent) plays the storm
// and a refused outage, in which each process stops its own containers, against a control plane
// whose 429s name nothing: every STOPPED settled exactly once, nothing cleaned before its ack
// (the child asks the control plane at each removal), every journal verified by its process at
// its clean stop — and no process left behind, nor a journal directory; and the throttle was
// met.
func TestFleetAsProcessesSettlesOnceAndLeavesNothing(t *testing.T) {
	bin := benchBinary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := benchmark.Fleet(ctx, benchmark.FleetOptions{Agents: 8, Tasks: 2, RPS: 5, Burst: 2, Outage: 2 * time.Second,
		JournalDir: dir, Policies: []string{"agentd"}, Scenarios: []string{"storm", "outage-refused"},
		RetryAfter: []string{controlplane.RetryAfterNone}, Processes: true, Self: bin})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 {
		t.Fatalf("%d rows; want 2 (storm, outage-refused)", len(res.Rows))
	}
	for _, r := range res.Rows {
		if !r.Finished || r.SettledTwice != 0 {
			t.Errorf("%s: finished %v, %d changes not settled exactly once", r.Scenario, r.Finished, r.SettledTwice)
		}
		if r.Cleanups == 0 || r.EarlyCleanups != 0 {
			t.Errorf("%s: %d cleanups seen, %d before the ack; want some, none early", r.Scenario, r.Cleanups, r.EarlyCleanups)
		}
	}
	// Met in the round that started the tasks, where the new agents report at once: a fleet
	// that learnt its places may meet none in the storm.
	if res.Throttled == 0 {
		t.Errorf("no request answered 429 in any round: the throttle naming nothing was not met")
	}
	if res.JournalIssues != 0 {
		t.Errorf("journal verify: %d findings", res.JournalIssues)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "agentd-fleet-*"))
	if len(left) != 0 {
		t.Errorf("journal directories left: %v", left)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), bin) && strings.Contains(string(b), "fleet-agent") {
			t.Errorf("a fleet-agent process outlived the bench: %s", p)
		}
	}
}
