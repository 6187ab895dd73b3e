//go:build plantedbugs

package explore

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/guard"
)

// plantedBugs is each planted bug, the bounds the explorer finds it within, and the violation
// it must find (what the simulation finds too: internal/simulation's planted-bug tests).
var plantedBugs = []struct {
	guards []guard.Name
	bounds Bounds
}{
	{[]guard.Name{guard.CleanupAfterAck}, Bounds{Tasks: 1, Containers: 1, Want: "REMOVED BEFORE SETTLED"}},
	{[]guard.Name{guard.StartInFlight}, Bounds{Tasks: 1, Containers: 2, Want: "STOPPED BUT RUNNING"}},
	{[]guard.Name{guard.ImageInUse}, Bounds{Tasks: 1, Containers: 1, Want: "IMAGE OF A LIVE TASK REMOVED"}},
	{[]guard.Name{guard.CallWaits}, Bounds{Tasks: 1, Containers: 1, Want: "INVARIANT"}},
	{[]guard.Name{guard.SettleRule}, Bounds{Tasks: 1, Containers: 1, Want: "INVARIANT"}},
	{[]guard.Name{guard.StartInFlight, guard.RuntimeStartCheck}, Bounds{Tasks: 1, Containers: 1, Want: "RUN TWICE"}},
	{[]guard.Name{guard.LateStartFence}, Bounds{Tasks: 1, Containers: 1, Want: "STOPPED BUT RUNNING"}},
}

// The explorer finds every planted bug: run once per bug, in a process of its own with that
// guard off (the guards are read at start), it must find the bug's violation within 30 steps
// and 60 s. Each child prints its counterexample as an engine script.
func TestExplorerFindsEveryPlantedBug(t *testing.T) {
	if names := os.Getenv(guard.Env); names != "" {
		findPlantedBug(t, names)
		return
	}
	for _, bug := range plantedBugs {
		names := make([]string, len(bug.guards))
		for k, g := range bug.guards {
			names[k] = string(g)
		}
		t.Run(strings.Join(names, "+"), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestExplorerFindsEveryPlantedBug$", "-test.v")
			cmd.Env = append(os.Environ(), guard.Env+"="+strings.Join(names, ","))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Logf("%s", regexp.MustCompile(`(?m)^=== RUN.*\n|^--- PASS.*\n|^PASS\n`).ReplaceAllString(string(out), ""))
		})
	}
}

func findPlantedBug(t *testing.T, names string) {
	for _, bug := range plantedBugs {
		var want []string
		for _, g := range bug.guards {
			want = append(want, string(g))
		}
		if strings.Join(want, ",") != names {
			continue
		}
		b := bug.bounds
		b.Depth, b.Faults, b.Crashes, b.Timeout = 30, 2, 1, 60*time.Second
		r := Search(b)
		if r.Violation == "" || len(r.Trace) > 30 {
			t.Fatalf("with %s off the explorer did not find %q within 30 steps: %s", names, b.Want, r)
		}
		fmt.Printf("planted %s: %d steps, found in %s (%d states): %s\n", names, len(r.Trace), r.Elapsed.Round(time.Millisecond), r.States, r.Violation)
		fmt.Print(Script(b, r.Trace, r.Violation))
		return
	}
	t.Fatalf("%s=%s names no planted bug of this test", guard.Env, names)
}
