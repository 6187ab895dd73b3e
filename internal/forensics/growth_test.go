package forensics

import (
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fleetOf is one export of n entries of one task: n/32 hosts with 4 containers each (a lane
// per 8 entries), every third entry a health verdict drawn on its lane.
func fleetOf(n int) []*HostFile {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	entries, lines := make([]Entry, n), make([]int32, n)
	for i := range entries {
		lines[i] = int32(i + 1)
		host := i % max(n/32, 1)
		e := Entry{Host: fmt.Sprintf("host-%d", host), Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Millisecond),
			Type: "container_transitioned", Task: "arn:t", Container: fmt.Sprintf("c%d", i/max(n/32, 1)%4), To: "RUNNING", Text: "RUNNING"}
		if i%3 == 0 {
			e.Type, e.Text = "health_changed", "health=HEALTHY"
		}
		entries[i] = e
	}
	return []*HostFile{{Path: "fleet.jsonl", entries: entries, lines: lines}}
}

// threadCPU is the CPU time the calling thread has used: the work done, whatever else runs
// on the machine (wall-clock time is not).
func threadCPU(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mergedViewsCPU is the least CPU time of two runs of every merged view of the fleet: the
// timeline, its text and drawing, and the dump's entries.
func mergedViewsCPU(t *testing.T, files []*HostFile) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := time.Duration(1<<63 - 1)
	for range 2 {
		runtime.GC()
		start := threadCPU(t)
		tl, err := FleetTimeline(files, "arn:t", nil)
		if err != nil {
			t.Fatal(err)
		}
		tl.WriteText(io.Discard)
		if err := tl.WriteSVG(io.Discard); err != nil {
			t.Fatal(err)
		}
		if _, err := TaskEntries(files, "arn:t", nil); err != nil {
			t.Fatal(err)
		}
		best = min(best, threadCPU(t)-start)
	}
	return best
}

// TestMergedViewsGrowNearLinearly: 4x the entries (and 4x the hosts and containers) costs at
// most 8x the CPU time (n log n: about 4.5x; what was quadratic in lanes and hosts: 16x).
func TestMergedViewsGrowNearLinearly(t *testing.T) {
	if testing.Short() {
		t.Skip("400,000 entries merged twice: seconds of CPU")
	}
	const n = 80_000
	small := mergedViewsCPU(t, fleetOf(n))
	large := mergedViewsCPU(t, fleetOf(4*n))
	ratio := float64(large) / float64(small)
	t.Logf("merged views of one task: %d entries %v, %d entries %v CPU: %.1fx", n, small, 4*n, large, ratio)
	if ratio > 8 {
		t.Fatalf("%d entries cost %.1fx the CPU time of %d: the merged views grow faster than n log n", 4*n, ratio, n)
	}
}
