package benchmark

import (
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// RememberedResult is what the projection holds for tasks cleaned within the retention: the
// heap each remembered task costs, as the agent holds it while running (built record by
// record) and after a restart (restored from a snapshot), and the snapshot's bytes a task.
type RememberedResult struct {
	Tasks           int     `json:"tasks"`
	PerPayload      int     `json:"tasks_per_payload"`
	HeapPerTask     float64 `json:"heap_bytes_per_task"`          // live: applied record by record
	RestoredPerTask float64 `json:"restored_heap_bytes_per_task"` // after a restart: from the snapshot
	SnapshotPerTask float64 `json:"snapshot_bytes_per_task"`
	RecordsPerTask  float64 `json:"records_per_task"`
}

// heapNow is the live heap after a full collection.
func heapNow() uint64 {
	runtime.GC()
	runtime.GC() // the second settles what finalizers of the first released
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Remembered runs n one-container tasks through their whole life in a projection — received
// perPayload to a payload, run, exited 0, reported, acknowledged, cleaned — and measures the
// heap the projection then holds for them: what remembering a cleaned task costs.
func Remembered(n, perPayload int) (RememberedResult, error) {
	res := RememberedResult{Tasks: n, PerPayload: max(perPayload, 1)}
	data, err := rememberLive(&res)
	if err != nil {
		return res, err
	}
	res.SnapshotPerTask = float64(len(data)) / float64(n)
	before := heapNow() // the snapshot's bytes are held across both readings
	restored, err := fsm.Restore(data)
	if err != nil {
		return res, err
	}
	res.RestoredPerTask = float64(int64(heapNow())-int64(before)) / float64(n)
	runtime.KeepAlive(restored)
	runtime.KeepAlive(data)
	return res, nil
}

// rememberLive builds the projection record by record, measures it, and returns its snapshot:
// the projection itself is gone when it returns.
func rememberLive(res *RememberedResult) ([]byte, error) {
	n := res.Tasks
	before := heapNow()
	st, records, err := remember(n, res.PerPayload)
	if err != nil {
		return nil, err
	}
	res.RecordsPerTask = float64(records) / float64(n)
	res.HeapPerTask = float64(int64(heapNow())-int64(before)) / float64(n)
	if len(st.Tombstones) != n || len(st.Tasks) != 0 {
		return nil, fmt.Errorf("remembered: %d tombstones and %d live tasks, want %d and 0", len(st.Tombstones), len(st.Tasks), n)
	}
	return st.Snapshot()
}

// remember applies the records of n whole task lives to a new projection, perPayload tasks to
// a payload: the tasks of a payload are added together, then each runs its life.
func remember(n, perPayload int) (*fsm.State, int, error) {
	st := fsm.New()
	const journalID = "01JBENCHREMEMBERED0000000000"
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var seq uint64
	apply := func(task, container string, e event.Event) error {
		seq++
		now = now.Add(recordStep)
		return st.Apply(event.Record{Seq: seq, Time: now, Task: task, Container: container, Event: e})
	}
	if err := apply("", "", &event.AgentStarted{AgentID: "agent-bench", JournalID: journalID, Version: "bench"}); err != nil {
		return nil, 0, err
	}
	code := 0
	tr := func(from, to event.Status) *event.ContainerTransitioned {
		return &event.ContainerTransitioned{From: from, To: to}
	}
	tk := func(from, to event.Status) *event.TaskTransitioned {
		return &event.TaskTransitioned{From: from, To: to}
	}
	arnOf := func(i int) string { return fmt.Sprintf("arn:agentd:task/remembered-%08d", i) }
	for first := 0; first < n; first += perPayload {
		msg := fmt.Sprintf("msg-%08d-%s", first, "b1f0c2d4")
		if err := apply("", "", &event.PayloadReceived{MessageID: msg}); err != nil {
			return nil, 0, err
		}
		for i := first; i < min(first+perPayload, n); i++ {
			if err := apply(arnOf(i), "", &event.TaskAdded{MessageID: msg, Family: "web", Version: "3", Desired: event.StatusRunning, Containers: benchSpec}); err != nil {
				return nil, 0, err
			}
		}
	}
	for i := 0; i < n; i++ {
		arn := arnOf(i)
		id := func(s uint64) string { return "c-" + journalID + "-" + strconv.FormatUint(s, 10) }
		var stopC, stopT uint64
		steps := []func() error{
			func() error { return apply(arn, "app", tr("NONE", "PULLED")) },
			func() error { return apply(arn, "", tk("NONE", "PULLED")) },
			func() error {
				return apply(arn, "app", &event.ContainerTransitioned{From: "PULLED", To: "CREATED", RuntimeID: "rt-" + arn})
			},
			func() error { return apply(arn, "", tk("PULLED", "CREATED")) },
			func() error { return apply(arn, "app", tr("CREATED", "RUNNING")) },
			func() error { return apply(arn, "", tk("CREATED", "RUNNING")) },
			func() error {
				stopC = seq + 1
				return apply(arn, "app", &event.ContainerTransitioned{From: "RUNNING", To: "STOPPED", ExitCode: &code})
			},
			func() error {
				stopT = seq + 1
				return apply(arn, "", &event.TaskTransitioned{From: "RUNNING", To: "STOPPED", Reason: "essential container app exited with code 0"})
			},
			func() error {
				st.Pending(10) // reported, as the engine does before the answer settles them
				return apply(arn, "", &event.ChangesSettled{Accepted: []string{id(stopC), id(stopT)}})
			},
			func() error { return apply(arn, "", &event.StoppedAcked{ChangeID: id(stopT)}) },
			func() error { return apply(arn, "", &event.CleanupStarted{}) },
			func() error { return apply(arn, "app", &event.ContainerRemoved{}) },
			func() error { return apply(arn, "", &event.TaskCleaned{}) },
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return nil, 0, err
			}
		}
	}
	return st, int(seq), nil
}
