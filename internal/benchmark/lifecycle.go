package benchmark

import (
	"context"
	"fmt"
	"slices"
	"syscall"
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
	// CPU of the whole process over the storm, per task: the agent, and beside it the
	// in-process control plane and simulated runtime (whose per-call scans are gone, so the
	// agent is most of it).
	CPUPerTaskMs float64 `json:"cpu_ms_per_task"`
	// A lone task's latency, assignment to its STOPPED accepted by the control plane, over
	// LoneTasks run one at a time on an idle agent: what batching must not slow.
	LoneTasks int     `json:"lone_tasks"`
	LoneP50Ms float64 `json:"lone_p50_ms"`
	LoneP99Ms float64 `json:"lone_p99_ms"`
}

// Lifecycle assigns n tasks through an in-process control plane (unthrottled) to an agent on
// the simulated runtime and measures until every one is cleaned: assign → run → stop →
// reported → acknowledged → cleaned, every step journaled.
func Lifecycle(ctx context.Context, dirParent string, n int) (LifecycleResult, error) {
	res := LifecycleResult{Tasks: n, LoneTasks: min(200, max(n/50, 20))}
	var err error
	if res.LoneP50Ms, res.LoneP99Ms, err = loneTasks(ctx, dirParent, res.LoneTasks); err != nil {
		return res, err
	}
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
	start, cpu0 := time.Now(), processCPU()
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
	res.CPUPerTaskMs = float64(processCPU()-cpu0) / float64(time.Millisecond) / float64(n)
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

// loneTasks runs n tasks one after another on an idle agent and returns the p50 and p99 of
// each one's time from assignment to its STOPPED accepted by the control plane.
func loneTasks(ctx context.Context, dirParent string, n int) (p50, p99 float64, err error) {
	r, err := newAgentRig(ctx, dirParent, controlplane.Faults{}, nil)
	if err != nil {
		return 0, 0, err
	}
	defer r.close()
	if err := r.start(ctx, engine.Config{CleanupWait: 0, CleanupJitter: -1, PollWait: time.Second}); err != nil {
		return 0, 0, err
	}
	took := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		arn := fmt.Sprintf("task/lone-%06d", i)
		start := time.Now()
		if err := r.cp.AddTask(benchAgent, protocol.Task{ARN: arn, DesiredStatus: "RUNNING",
			Containers: []protocol.Container{{Name: "app", Image: "x", Command: []string{"exit", "0"}}}}, nil); err != nil {
			return 0, 0, err
		}
		deadline := start.Add(30 * time.Second)
		for r.cp.TaskStatus(arn) != "STOPPED" {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return 0, 0, fmt.Errorf("bench lifecycle: lone task %s not STOPPED at the control plane within 30s", arn)
			}
			time.Sleep(50 * time.Microsecond)
		}
		took = append(took, float64(time.Since(start))/float64(time.Millisecond))
	}
	slices.Sort(took)
	return took[len(took)/2], took[(len(took)*99)/100], nil
}

// processCPU is the user and system time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
