package benchmark

import (
	"context"
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
)

// ThrottledOptions configure the throttled-reporting benchmark.
type ThrottledOptions struct {
	Dir   string
	RPS   float64 // the control plane's token bucket rate
	Tasks int     // stopped tasks waiting to be reported (two changes each)
}

// ThrottledResult compares the settle rate with the ceiling the throttle allows: R requests
// a second of 100 changes each.
type ThrottledResult struct {
	RPS             float64 `json:"rps"`
	Changes         int     `json:"changes"`
	Seconds         float64 `json:"seconds"`
	SettledPerSec   float64 `json:"settled_per_sec"`
	Ceiling         float64 `json:"ceiling_per_sec"`
	Ratio           float64 `json:"ratio"`
	Requests        int     `json:"requests"`
	Throttled       int     `json:"throttled"`
	ChangesPerBatch float64 `json:"changes_per_request"`
}

// Throttled measures how fast an agent settles a backlog of changes against a control plane
// throttled to RPS: full batches and no wasted waits give RPS × 100 changes a second.
func Throttled(ctx context.Context, o ThrottledOptions) (ThrottledResult, error) {
	if o.RPS <= 0 || o.Tasks <= 0 {
		return ThrottledResult{}, fmt.Errorf("bench throttled: --rps and --tasks must be positive")
	}
	r, err := newAgentRig(ctx, o.Dir, controlplane.Faults{ThrottleRPS: o.RPS, ThrottleBurst: 1}, nil)
	if err != nil {
		return ThrottledResult{}, err
	}
	defer r.close()
	cp, j := r.cp, r.j
	const agentID = benchAgent
	// The backlog: tasks the control plane assigned, journaled as stopped before they ran.
	var recs []event.Record
	now := time.Now()
	for i := 0; i < o.Tasks; i++ {
		arn := fmt.Sprintf("task/bench-%06d", i)
		cp.Adopt(agentID, protocol.Task{ARN: arn, DesiredStatus: "STOPPED", Containers: []protocol.Container{{Name: "app", Image: "x"}}})
		recs = append(recs,
			event.Record{Time: now, Task: arn, Event: &event.TaskAdded{Desired: event.StatusStopped, Containers: []event.ContainerSpec{{Name: "app", Image: "x", Essential: true}}}},
			event.Record{Time: now, Task: arn, Container: "app", Event: &event.ContainerTransitioned{From: event.StatusNone, To: event.StatusStopped, Reason: "not started"}},
			event.Record{Time: now, Task: arn, Event: &event.TaskTransitioned{From: event.StatusNone, To: event.StatusStopped, Reason: "desired STOPPED on arrival"}})
	}
	if _, err := j.Append(ctx, recs...); err != nil {
		return ThrottledResult{}, err
	}
	before := cp.Stats()
	start := time.Now()
	if err := r.start(ctx, engine.Config{CleanupWait: time.Hour, PollWait: time.Second}); err != nil {
		return ThrottledResult{}, err
	}
	want := 2 * o.Tasks
	var st controlplane.Stats
	for {
		st = cp.Stats()
		if st.ChangesAccepted >= want || ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	res := ThrottledResult{RPS: o.RPS, Changes: st.ChangesAccepted, Seconds: elapsed.Seconds(),
		Requests: st.Reports - before.Reports, Throttled: st.Throttled - before.Throttled}
	res.SettledPerSec = float64(res.Changes) / elapsed.Seconds()
	res.Ceiling = o.RPS * protocol.MaxChangesPerRequest
	res.Ratio = res.SettledPerSec / res.Ceiling
	if res.Requests > 0 {
		res.ChangesPerBatch = float64(res.Changes) / float64(res.Requests)
	}
	return res, ctx.Err()
}
