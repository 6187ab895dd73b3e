package engine_test

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/testrig"
)

var footprintTasks = flag.Int("footprint-tasks", 5000, "tasks TestFootprintStaysFlatUnderChurn runs through one agent (the issue's figure: 1000000)")

// liveHeap is the heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// fastDir is a directory on tmpfs when the host has one: the test counts bytes, not fsyncs.
func fastDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "agentd-footprint-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Many short tasks through one agent, on a virtual clock, with a retention far shorter than
// the run (a minute; a task a second): what the agent holds is bounded by what it remembers,
// not by what it has run. The heap after the last task is at most 1.2× the heap after the
// first tenth, and the journal's used bytes stop growing once the retention window is full.
func TestFootprintStaysFlatUnderChurn(t *testing.T) {
	n := *footprintTasks
	if testing.Short() {
		n = 2000
	}
	r := &rig{t: t, dir: fastDir(t), clock: testrig.NewClock(t0),
		cp:  &testrig.ControlPlane{},
		cfg: engine.Config{CleanupWait: 0, CleanupJitter: -1, Seed: 1, Retention: time.Minute, SnapshotEvery: 2000}}
	r.start()
	t.Cleanup(func() { r.j.Close() })
	var heapTenth uint64
	var sizes []int64
	for i := 0; i < n; i++ {
		arn := fmt.Sprintf("arn:aws:ecs:eu-west-1:123456789012:task/churn/%08d", i)
		r.assign(arn, "RUNNING", ctr("app", "exit", "0"))
		r.advance(time.Second)
		if i == 0 && r.known(arn) != event.StatusCleaned {
			t.Fatalf("the first task is %s a second after it came, not cleaned", r.known(arn))
		}
		if (i+1)%(n/10) == 0 {
			size, err := r.j.Size()
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, size)
			if heapTenth == 0 {
				r.cp.Forget() // the test's own record of reports
				heapTenth = liveHeap()
			}
		}
	}
	r.cp.Forget()
	heapEnd := liveHeap()
	st := r.e.State()
	t.Logf("%d tasks: heap %d after the first tenth, %d after the last; %d tombstones, %d message ids; used bytes each tenth %v",
		n, heapTenth, heapEnd, len(st.Tombstones), len(st.Messages), sizes)
	if float64(heapEnd) > 1.2*float64(heapTenth) {
		t.Errorf("heap grew from %d after the first tenth to %d after the last: more than 1.2×", heapTenth, heapEnd)
	}
	if mid, end := sizes[len(sizes)/2], sizes[len(sizes)-1]; float64(end) > 1.1*float64(mid) {
		t.Errorf("journal used bytes keep growing: %d halfway, %d at the end (each tenth %v)", mid, end, sizes)
	}
	if len(st.Tombstones) > 200 {
		t.Errorf("%d tombstones kept with a retention of a minute at a task a second", len(st.Tombstones))
	}
}
