package benchmark

import (
	"context"
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// LifecycleResult is full task lifecycles driven through a real agent, and what the journal
// paid for each.
type LifecycleResult struct {
	Tasks       int     `json:"tasks"`
	Seconds     float64 `json:"seconds"`
	TasksPerSec float64 `json:"tasks_per_sec"`
	Records     uint64  `json:"records"`
	Commits     uint64  `json:"commits"`
	// Per task, from assignment to cleaned: the ECS agent's store makes at least one DB.Batch
	// transaction (two fsyncs) per saved transition, about ten a task.
	CommitsPerTask     float64 `json:"commits_per_task"`
	FsyncsPerTask      float64 `json:"fsyncs_per_task"` // two a bbolt commit: data pages, then meta
	RecordsPerTask     float64 `json:"records_per_task"`
	RecordBytesPerTask float64 `json:"record_bytes_per_task"` // encoded records appended
	DiskBytesPerTask   float64 `json:"disk_bytes_per_task"`   // pages written, the meta page included
	// What the journal holds at the end, as `journal stats` counts it: the used bytes (bbolt's
	// pages, snapshots included) over the records in it — the real mix, not a synthetic record.
	UsedBytes      int64   `json:"used_bytes"`
	BytesPerRecord float64 `json:"used_bytes_per_record"`
}

// Lifecycle assigns n tasks through an in-process control plane (unthrottled) to an agent on
// the simulated runtime and measures until every one is cleaned: assign → run → stop →
// reported → acknowledged → cleaned, every step journaled.
func Lifecycle(ctx context.Context, dirParent string, n int) (LifecycleResult, error) {
	res := LifecycleResult{Tasks: n}
	r, err := newAgentRig(ctx, dirParent, controlplane.Faults{}, nil)
	if err != nil {
		return res, err
	}
	defer r.close()
	if err := r.start(ctx, engine.Config{CleanupWait: 0, CleanupJitter: -1, PollWait: time.Second}); err != nil {
		return res, err
	}
	cp, j, eng := r.cp, r.j, r.e
	const agentID = benchAgent
	start := time.Now()
	before, pages0 := j.Stats(), pages(j.DB())
	for i := 0; i < n; i++ {
		t := protocol.Task{ARN: fmt.Sprintf("task/life-%06d", i), DesiredStatus: "RUNNING",
			Containers: []protocol.Container{{Name: "app", Image: "x", Command: []string{"exit", "0"}}}}
		if err := cp.AddTask(agentID, t, nil); err != nil {
			return res, err
		}
	}
	for {
		var cleaned int
		if err := eng.Query(ctx, func(st *fsm.State) { cleaned = len(st.Tombstones) }); err != nil {
			return res, err
		}
		if cleaned == n {
			break
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.Seconds = time.Since(start).Seconds()
	res.TasksPerSec = float64(n) / res.Seconds
	after := j.Stats()
	res.Records, res.Commits = after.Records-before.Records, after.Commits-before.Commits
	per := float64(n)
	res.CommitsPerTask = float64(res.Commits) / per
	res.FsyncsPerTask = 2 * res.CommitsPerTask
	res.RecordsPerTask = float64(res.Records) / per
	res.RecordBytesPerTask = float64(after.Bytes-before.Bytes) / per
	res.DiskBytesPerTask = float64((pages(j.DB())-pages0)+int64(res.Commits)) * float64(j.DB().Info().PageSize) / per
	if res.UsedBytes, err = j.Size(); err != nil {
		return res, err
	}
	res.BytesPerRecord = float64(res.UsedBytes) / float64(j.LastSeq())
	return res, nil
}
