package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/submit"
)

// Recover rebuilds the projection (Load), settles the agent id, then in one burst journals
// agent_started and what reconciling the runtime found. Any record the projection refuses
// stops the agent: it names the record and points to `agentd journal verify`, and drops
// nothing.
func (e *Engine) Recover(ctx context.Context) error {
	e.startedAt = time.Now()
	l, err := Load(e.j, 0)
	for _, s := range l.Skipped {
		e.log.Warn().Err(s).Msg("skipping a damaged snapshot, replaying further back")
	}
	if err != nil {
		return fmt.Errorf("engine: recover: %w", err)
	}
	e.st, e.snapSeq = l.State, l.FromSnap
	e.journaledCursor = e.st.ExitCursor
	want := e.cfg.AgentID
	if want == "" {
		want = e.st.AgentID // a journal from before the id was kept in its meta
	}
	id, err := ResolveAgentID(ctx, e.j, want)
	if err != nil {
		return err
	}
	if e.st.AgentID != "" && e.st.AgentID != id {
		return fmt.Errorf("--agent-id %q: the journal in %s belongs to agent %q; use that id or another data dir", id, e.j.Path(), e.st.AgentID)
	}
	e.cfg.AgentID = id
	observed, err := observe(ctx, e.rt, e.probes())
	if err != nil {
		// The agent stays up without its runtime (down, or not answering in time): it
		// journals payloads, reports what is pending and asks the runtime again with
		// backoff; no runtime call is made before the runtime has been reconciled.
		e.reconcilePending = true
		e.setHealth(HealthRuntime, "not reconciled yet: "+err.Error())
		e.log.Warn().Err(err).Msgf("the %s runtime does not answer; running unreconciled, no runtime call until it does", e.rt.Name())
	}
	e.beginBurst(ctx)
	e.record(event.Record{Event: &event.AgentStarted{Version: e.cfg.Version, PID: os.Getpid(), AgentID: id, JournalID: e.j.ID(), Runtime: e.cfg.RuntimeName}})
	if !e.reconcilePending {
		e.reconciled(e.clock.Now(), observed)
	}
	for _, t := range e.st.SortedTasks() { // in order: cleanup jitter is drawn per task
		e.dirty[t.ARN] = true
		if t.Known == event.StatusStoppedAcked {
			e.scheduleCleanup(t)
		}
	}
	if _, err := e.endBurst(); err != nil {
		return fmt.Errorf("engine: recover: %w", err)
	}
	e.log.Info().Uint64("seq", e.st.LastSeq).Int("replayed", l.Replayed).Uint64("snapshot", e.snapSeq).
		Int("tasks", len(e.st.Tasks)).Int("unsent", e.st.OutboxLen()).Dur("took", time.Since(e.startedAt)).Msg("projection recovered")
	e.sub = submit.New(e.cfg.Submit)
	e.ready.Store(true)
	return nil
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

// probe is a container reconcile must ask about beyond the runtime's list: one created but
// never journaled (found by name), or one known by id (gone, or just not listed).
type probe struct {
	task, container, id string
}

// probes are read from the projection on the loop, so that observe can run anywhere.
func (e *Engine) probes() []probe {
	var out []probe
	for _, t := range e.st.SortedTasks() {
		if t.Known.Rank() >= event.StatusStopped.Rank() {
			continue
		}
		for _, c := range t.Containers {
			switch {
			case (c.Known == event.StatusPulled || c.Known == event.StatusCreated) && c.RuntimeID == "":
				// created but never journaled; CREATED without an id: made again after a rollback
				out = append(out, probe{task: t.ARN, container: c.Name})
			case c.RuntimeID != "" && (c.Known == event.StatusCreated || c.Known == event.StatusRunning):
				out = append(out, probe{task: t.ARN, container: c.Name, id: c.RuntimeID})
			}
		}
	}
	return out
}

// observe asks the runtime what it holds of this agent's containers, for reconcile: every
// container it lists; a container created but never journaled, found by name; and, for each
// container known by id that the runtime does not list, whether it is gone.
func observe(ctx context.Context, rt docker.Runtime, probes []probe) ([]fsm.Observed, error) {
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
		case p.id == "":
			if s, err := rt.Find(ctx, p.task, p.container); err == nil && !listed[s.ID] {
				listed[s.ID] = true
				out = append(out, observed(s))
			}
		case !listed[p.id]:
			_, err := rt.Inspect(ctx, p.id)
			if errors.Is(err, docker.ErrNotFound) {
				out = append(out, fsm.Observed{ID: p.id, Task: p.task, Container: p.container, Gone: true})
			} else if errors.Is(err, docker.ErrUnavailable) {
				return nil, err
			}
		}
	}
	return out, nil
}

func observed(s docker.State) fsm.Observed {
	return fsm.Observed{ID: s.ID, Task: s.Task, Container: s.Container, Running: s.Running, Exited: s.Exited, ExitCode: s.ExitCode, OOMKilled: s.OOMKilled}
}

// ResolveAgentID settles the agent id before anything else needs it (the runtime labels
// containers with it): the journal's, else the one given, else a new one — kept in the
// journal's meta, its one home. A given id that contradicts the journal is refused: the
// journal's tasks belong to its agent.
func ResolveAgentID(ctx context.Context, j *journal.Journal, given string) (string, error) {
	kept, err := j.Meta("agent_id")
	if err != nil {
		return "", fmt.Errorf("journal %s: %w", j.Path(), err)
	}
	switch {
	case given != "" && kept != "" && given != kept:
		return "", fmt.Errorf("--agent-id %q: the journal in %s belongs to agent %q; use that id or another --data-dir", given, j.Path(), kept)
	case kept != "":
		return kept, nil
	case given == "":
		r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		given = fmt.Sprintf("agent-%08x%08x", r.Uint32(), r.Uint32())
	}
	if err := j.SetMeta(ctx, "agent_id", given); err != nil {
		return "", err
	}
	return given, nil
}
