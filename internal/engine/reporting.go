package engine

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/fsm"
)

// Reporting is the submitter as an operator sees it: whether a report awaits its answer, the
// failure streak it is in (throttled, server_error, …; "" while reports settle) and since
// when, when it may send next, and what it has seen since the agent started.
type Reporting struct {
	InFlight    bool      `json:"in_flight"`
	Streak      string    `json:"streak,omitempty"`
	StreakSince time.Time `json:"streak_since,omitzero"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	Requests    uint64    `json:"requests"`
	Throttled   uint64    `json:"throttled"`
	Failed      uint64    `json:"failed"`
	Accepted    uint64    `json:"accepted"`
	Rejected    uint64    `json:"rejected"`
	// PaceSeconds is the spacing of requests the control plane's throttle has taught the
	// submitter (0: no throttling seen).
	PaceSeconds float64 `json:"pace_seconds,omitempty"`
}

// QueryWithReporting is Query with the submitter's state beside the projection, both read on
// the loop's goroutine (the submitter is the loop's own), so the two agree with each other.
func (e *Engine) QueryWithReporting(ctx context.Context, f func(*fsm.State, Reporting)) error {
	return e.Query(ctx, func(st *fsm.State) {
		var r Reporting
		if s := e.sub; s != nil {
			streak, since := s.Streak()
			r = Reporting{InFlight: s.InFlight(), Streak: string(streak), StreakSince: since,
				Requests: s.Stats.Requests, Throttled: s.Stats.Throttled, Failed: s.Stats.Failed,
				Accepted: s.Stats.Accepted, Rejected: s.Stats.Rejected, PaceSeconds: s.Pace().Seconds()}
			if next := s.NextAttempt(); next.After(e.clock.Now()) {
				r.NextAttempt = next
			}
		}
		f(st, r)
	})
}
