package engine_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
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

// warmSnapshotCodec takes the process's snapshot compressor to its full size: it packs, stores
// and reads back a snapshot of many blocks in a throwaway journal. The compressor is shared by
// every journal in the process and grows once, on the first snapshot larger than one block
// (64 KiB before compression), by its history (its 256 KiB window and a block: 384 KiB), then
// keeps that size whatever comes after (a snapshot read has a decompressor of its own). Run alone, the churn below crosses 64 KiB only after its first tenth,
// and that one-time growth would be counted as churn (1.70 MB to 2.22 MB).
func warmSnapshotCodec(t *testing.T) {
	t.Helper()
	j, err := journal.Open(filepath.Join(fastDir(t), journal.FileName), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	packed, size, err := journal.PackSnapshot(func(put func([]byte) error) (int64, error) {
		var n int64
		for i := range 20000 { // about 2 MB: many blocks, as a busy host's snapshot
			line := fmt.Appendf(nil, `{"arn":"arn:aws:ecs:eu-west-1:123456789012:task/warm/%08d","known":"CLEANED","at":%d},`, i, i*7919)
			if err := put(line); err != nil {
				return n, err
			}
			n += int64(len(line))
		}
		return n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.AppendPackedSnapshot(context.Background(), 0, packed); err != nil {
		t.Fatal(err)
	}
	snap, _, err := j.LatestSnapshot()
	if err != nil || snap == nil || int64(len(snap.Data)) != size {
		t.Fatalf("the warm-up snapshot did not come back whole (%v, %v)", snap != nil, err)
	}
}

// Many short tasks through one agent, on a virtual clock, with a retention far shorter than
// the run (a minute; a task a second): what the agent holds is bounded by what it remembers,
// not by what it has run. The heap after the last task is at most 1.2× the heap after the
// first tenth, and the journal's used bytes stop growing once the retention window is full.
// What the process allocates once (the snapshot codec) is allocated before the first measure.
func TestFootprintStaysFlatUnderChurn(t *testing.T) {
	warmSnapshotCodec(t)
	n := *footprintTasks
	if testing.Short() {
		n = 2000
	}
	r := &rig{t: t, dir: fastDir(t), clock: &fakeClock{now: t0},
		cp:  &scriptedCP{answer: acceptAll, accepted: map[string]int{}},
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
				r.cp.sent, r.cp.accepted = nil, map[string]int{} // the test's own record of reports
				heapTenth = liveHeap()
			}
		}
	}
	r.cp.sent, r.cp.accepted = nil, map[string]int{}
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
