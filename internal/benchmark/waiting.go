package benchmark

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// WaitingResult is what N tasks stopped and awaiting their acknowledgement cost, and how soon
// cleanup follows the acknowledgement.
type WaitingResult struct {
	Tasks          int     `json:"tasks"`
	GoroutinesIdle int     `json:"goroutines_before"` // before the agent started
	Goroutines     int     `json:"goroutines_waiting"`
	HeapMB         float64 `json:"heap_mb_waiting"`
	CleanupP50ms   float64 `json:"cleanup_after_ack_p50_ms"`
	CleanupP99ms   float64 `json:"cleanup_after_ack_p99_ms"`
	SettleSeconds  float64 `json:"settle_seconds"`
}

// Waiting journals N stopped tasks, runs a real agent against a control plane that throttles
// every report, and measures goroutines and heap while all N wait; then lets the reports
// through and measures, per task, the time from its stopped-acked record to its cleanup start.
func Waiting(ctx context.Context, dirParent string, n int) (WaitingResult, error) {
	res := WaitingResult{Tasks: n}
	var open atomic.Bool
	gate := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !open.Load() && r.Method == http.MethodPost {
				w.Header().Set("Retry-After", "0.2")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	rig, err := newAgentRig(ctx, dirParent, controlplane.Faults{}, gate)
	if err != nil {
		return res, err
	}
	defer rig.close()
	cp, j := rig.cp, rig.j
	const agentID = benchAgent
	var recs []event.Record
	now := time.Now()
	for i := 0; i < n; i++ {
		arn := fmt.Sprintf("task/wait-%06d", i)
		cp.Adopt(agentID, protocol.Task{ARN: arn, DesiredStatus: "RUNNING", Containers: []protocol.Container{{Name: "app", Image: "x"}}})
		recs = append(recs,
			event.Record{Time: now, Task: arn, Event: &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "app", Image: "x", Essential: true}}}},
			event.Record{Time: now, Task: arn, Container: "app", Event: &event.ContainerTransitioned{From: event.StatusNone, To: event.StatusStopped, Reason: "pull failed"}},
			event.Record{Time: now, Task: arn, Event: &event.TaskTransitioned{From: event.StatusNone, To: event.StatusStopped}})
	}
	if _, err := j.Append(ctx, recs...); err != nil {
		return res, err
	}
	runtime.GC()
	res.GoroutinesIdle = runtime.NumGoroutine()
	if err := rig.start(ctx, engine.Config{CleanupWait: 0, PollWait: 5 * time.Second}); err != nil {
		return res, err
	}
	eng := rig.e
	// Let the throttled reports go round a few times, then measure the cost of waiting.
	time.Sleep(time.Second)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.Goroutines = runtime.NumGoroutine()
	res.HeapMB = float64(ms.HeapInuse) / (1 << 20)
	start := time.Now()
	open.Store(true)
	for {
		var left int
		_ = eng.Query(ctx, func(st *fsm.State) { left = len(st.Tasks) })
		if left == 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.SettleSeconds = time.Since(start).Seconds()
	acked := map[string]time.Time{}
	var lat []time.Duration
	err = j.Iterate(1, func(r event.Record) error {
		switch r.Event.(type) {
		case *event.StoppedAcked:
			acked[r.Task] = r.Time
		case *event.CleanupStarted:
			lat = append(lat, r.Time.Sub(acked[r.Task]))
		}
		return nil
	})
	if err != nil || len(lat) == 0 {
		return res, fmt.Errorf("bench waiting: no cleanups measured: %v", err)
	}
	slices.Sort(lat)
	res.CleanupP50ms = float64(lat[len(lat)/2]) / 1e6
	res.CleanupP99ms = float64(lat[len(lat)*99/100]) / 1e6
	return res, nil
}
