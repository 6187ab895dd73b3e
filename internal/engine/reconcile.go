package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/runtime"
)

// reconciler is the engine's side of reconciling the runtime after it did not answer at
// recovery: when to ask it again (the node keeps the gate — no runtime call before the
// runtime is reconciled — and which containers to probe, fsm/nodereconcile.go). It guards
// that the runtime is asked again with backoff until it answers, one question at a time.
type reconciler struct {
	waiting bool            // the runtime did not answer, and is not being asked now
	at      time.Time       // when to ask again
	bo      *jitter.Backoff // the wait before asking again (internal/jitter)
}

// due reports whether the runtime should be asked again now.
func (r *reconciler) due(now time.Time) bool { return r.waiting && !r.at.After(now) }

// next is when the runtime is asked again (zero: not waiting).
func (r *reconciler) next() time.Time {
	if r.waiting {
		return r.at
	}
	return time.Time{}
}

// asked: a Ready's question is out.
func (r *reconciler) asked() { r.waiting = false }

// failed schedules the next question, later each time, its jitter from the loop's rng.
func (r *reconciler) failed(now time.Time, rng *rand.Rand) {
	r.waiting = true
	if r.bo == nil {
		r.bo = jitter.NewBackoff(time.Second, 30*time.Second, rng)
	}
	r.at = now.Add(r.bo.NextBackOff())
}

// handleReconcile hands the node what the runtime answered when asked again, or that it did
// not answer.
func (e *Engine) handleReconcile(now time.Time, in ReconcileInput) {
	if in.Err != nil {
		e.recon.failed(now, e.rng)
		e.setHealth(HealthRuntime, "not reconciled yet: "+in.Err.Error())
		_ = e.node.Step(now, fsm.RuntimeUnanswered{Err: in.Err.Error()})
		return
	}
	e.recon = reconciler{}
	e.clearHealth(HealthRuntime)
	e.reconciled(now, in.Observed)
}

// reconciled hands the node what the runtime holds.
func (e *Engine) reconciled(now time.Time, observed []fsm.Observed) {
	n := len(e.node.Ready().Records)
	_ = e.node.Step(now, fsm.RuntimeObserved{Containers: observed})
	if k := len(e.node.Ready().Records) - n; k > 0 {
		e.log.Info().Int("records", k).Msg("runtime reconciled")
	}
}

// observe asks the runtime what it holds of this agent's containers, for reconcile: every
// container it lists; a container created but never journaled, found by name; and, for each
// container known by id that the runtime does not list, whether it is gone.
func observe(ctx context.Context, rt runtime.Runtime, probes []fsm.Probe) ([]fsm.Observed, error) {
	owned, err := rt.List(ctx)
	if err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	out := make([]fsm.Observed, 0, len(owned))
	for _, s := range owned {
		listed[s.ID] = true
		out = append(out, observed(s))
	}
	for _, p := range probes {
		switch {
		case p.ID == "":
			if s, err := rt.Find(ctx, p.Task, p.Container); err == nil && !listed[s.ID] {
				listed[s.ID] = true
				out = append(out, observed(s))
			}
		case !listed[p.ID]:
			_, err := rt.Inspect(ctx, p.ID)
			if errors.Is(err, runtime.ErrNotFound) {
				out = append(out, fsm.Observed{ID: p.ID, Task: p.Task, Container: p.Container, Gone: true})
			} else if errors.Is(err, runtime.ErrUnavailable) {
				return nil, err
			}
		}
	}
	return out, nil
}

// observed is a container as the runtime shows it, in the core's terms: the one mapping of
// the runtime's state, for reconcile and for the calls that look (start, stop, inspect).
func observed(s runtime.State) fsm.Observed {
	return fsm.Observed{ID: s.ID, Task: s.Task, Container: s.Container, Running: s.Running, Exited: s.Exited, ExitCode: s.ExitCode, OOMKilled: s.OOMKilled, Bindings: s.Bindings}
}
