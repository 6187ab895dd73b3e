package forensics

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fleetOf is one export of n entries of one task: n/8 hosts with 4 containers each (a lane
// per 2 entries: many lanes, where merging was quadratic), every third entry a health verdict
// drawn on its lane.
func fleetOf(n int) []*HostFile {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	entries, lines := make([]Entry, n), make([]int32, n)
	for i := range entries {
		lines[i] = int32(i + 1)
		host := i % max(n/8, 1)
		e := Entry{Host: fmt.Sprintf("host-%d", host), Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Millisecond),
			Type: "container_transitioned", Task: "arn:t", Container: fmt.Sprintf("c%d", i/max(n/8, 1)%4), To: "RUNNING", Text: "RUNNING"}
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

// mergedViewsCPU is the least CPU time of three runs of every merged view of the fleet: the
// timeline, its text and drawing, and the dump's entries. The collector is off while it
// measures: its share grows with the heap and varies with the machine's load.
func mergedViewsCPU(t *testing.T, files []*HostFile) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	best := time.Duration(1<<63 - 1)
	for range 3 {
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

// TestMergedViewsGrowNearLinearly: 8x the entries (and 8x the hosts and containers) costs at
// most 24x the CPU time. n log n is about 10x, and caches and a busy machine (other packages'
// tests beside this one) have made it 7.5-16x; what was quadratic in lanes and hosts is 64x
// (a linear search for a host, one of the mildest, measured 25x). 4x the entries with a
// bound of 8x (4.5x against 16x) failed once on a busy machine at 8.1x.
func TestMergedViewsGrowNearLinearly(t *testing.T) {
	if testing.Short() {
		t.Skip("180,000 entries merged three times: seconds of CPU")
	}
	const n, growth, bound = 20_000, 8, 24
	small := mergedViewsCPU(t, fleetOf(n))
	large := mergedViewsCPU(t, fleetOf(growth*n))
	ratio := float64(large) / float64(small)
	t.Logf("merged views of one task: %d entries %v, %d entries %v CPU: %.1fx", n, small, growth*n, large, ratio)
	if ratio > bound {
		t.Fatalf("%d entries cost %.1fx the CPU time of %d (bound %dx): the merged views grow faster than n log n", growth*n, ratio, n, bound)
	}
}
