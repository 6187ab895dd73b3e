package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/runtime"
)

// reconciler is the state of reconciling the runtime after the runtime did not answer at
// recovery. It guards that no runtime call is made before the runtime has been reconciled
// (pending: dispatch, the image cycle and the hand-out of slots wait), that one question is
// out at a time (asking), and that it is asked again with backoff until it answers.
type reconciler struct {
	pending bool            // the runtime is not reconciled yet
	asking  bool            // a reconcile's question is out
	at      time.Time       // when to ask again
	bo      *jitter.Backoff // the wait before asking again (internal/jitter)
}

// due reports whether the runtime should be asked again now.
func (r *reconciler) due(now time.Time) bool { return r.pending && !r.asking && !r.at.After(now) }

// next is when the runtime is asked again (zero: not pending, or a question is out).
func (r *reconciler) next() time.Time {
	if r.pending && !r.asking {
		return r.at
	}
	return time.Time{}
}

// failed schedules the next question, later each time, its jitter from the loop's rng.
func (r *reconciler) failed(now time.Time, rng *rand.Rand) {
	r.asking = false
	if r.bo == nil {
		r.bo = jitter.NewBackoff(time.Second, 30*time.Second, rng)
	}
	r.at = now.Add(r.bo.NextBackOff())
}

// handleReconcile records what the runtime answered when asked again; every task is decided
// again, since decisions were held back while unreconciled.
func (e *Engine) handleReconcile(now time.Time, in ReconcileInput) {
	if in.Err != nil {
		e.recon.failed(now, e.rng)
		e.setHealth(HealthRuntime, "not reconciled yet: "+in.Err.Error())
		return
	}
	e.recon = reconciler{}
	e.clearHealth(HealthRuntime)
	e.reconciled(now, in.Observed)
	e.markAll()
}

// reconciled records what the runtime holds, as the core reads it.
func (e *Engine) reconciled(now time.Time, observed []fsm.Observed) {
	v := e.st.Step(now, fsm.RuntimeObserved{Containers: observed})
	for _, o := range v.Strangers {
		e.log.Warn().Str("id", o.ID).Str("task", o.Task).Str("container", o.Container).Msg("container of this agent unknown to the journal; left alone")
	}
	e.record(v.Records...)
	if len(v.Records) > 0 {
		e.log.Info().Int("records", len(v.Records)).Msg("runtime reconciled")
	}
}

// Probe is a container reconcile must ask about beyond the runtime's list: one created but
// never journaled (found by name, ID ""), or one known by id (gone, or just not listed).
type Probe struct {
	Task, Container, ID string
}

// probes are read from the projection on the loop, so that observe can run anywhere.
func (e *Engine) probes() []Probe {
	var out []Probe
	for _, t := range e.st.SortedTasks() {
		if t.Known.Rank() >= event.StatusStopped.Rank() {
			continue
		}
		for _, c := range t.Containers {
			switch {
			case (c.Known == event.StatusPulled || c.Known == event.StatusCreated) && c.RuntimeID == "":
				// created but never journaled; CREATED without an id: made again after a rollback
				out = append(out, Probe{Task: t.ARN, Container: c.Name})
			case c.RuntimeID != "" && (c.Known == event.StatusCreated || c.Known == event.StatusRunning):
				out = append(out, Probe{Task: t.ARN, Container: c.Name, ID: c.RuntimeID})
			}
		}
	}
	return out
}

// observe asks the runtime what it holds of this agent's containers, for reconcile: every
// container it lists; a container created but never journaled, found by name; and, for each
// container known by id that the runtime does not list, whether it is gone.
func observe(ctx context.Context, rt runtime.Runtime, probes []Probe) ([]fsm.Observed, error) {
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
