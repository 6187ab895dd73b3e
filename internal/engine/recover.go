package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

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
	startedAt := time.Now()
	l, err := Load(e.j, 0)
	for _, s := range l.Skipped {
		e.log.Warn().Err(s).Msg("skipping a damaged snapshot, replaying further back")
	}
	if err != nil {
		return fmt.Errorf("engine: recover: %w", err)
	}
	e.st, e.upkeep.snapSeq, e.recoveredAt = l.State, l.FromSnap, l.State.LastSeq
	e.node = fsm.NewNode(e.st, e.nodeConfig()) // every task is decided at the first Tick
	e.coreHealth()                             // refusals the journal remembers: named, degraded only (quarantine.go)
	e.exitsFrom = resumeExitsAt(e.st.ExitCursor, startedAt)
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
	observed, err := observe(ctx, e.rt, e.node.Probes())
	reconciled := err == nil
	if err != nil {
		// The agent stays up without its runtime (down, or not answering in time): it
		// journals payloads, reports what is pending and asks the runtime again with
		// backoff; no runtime call is made before the runtime has been reconciled.
		e.recon.waiting = true
		_ = e.node.Step(e.clock.Now(), fsm.RuntimeUnanswered{Err: err.Error()})
		e.setHealth(HealthRuntime, "not reconciled yet: "+err.Error())
		e.log.Warn().Err(err).Msgf("the %s runtime does not answer; running unreconciled, no runtime call until it does", e.rt.Name())
	}
	e.beginBurst(ctx)
	_ = e.node.Step(e.clock.Now(), fsm.OwnRecord{Event: &event.AgentStarted{Version: e.cfg.Version, PID: os.Getpid(), AgentID: id, JournalID: e.j.ID(), Runtime: e.cfg.RuntimeName}})
	if reconciled {
		e.reconciled(e.clock.Now(), observed)
	}
	e.reoffer()
	e.scheduleCleanups()
	if _, err := e.endBurst(); err != nil {
		return fmt.Errorf("engine: recover: %w", err)
	}
	e.log.Info().Uint64("seq", e.st.LastSeq).Int("replayed", l.Replayed).Uint64("snapshot", e.upkeep.snapSeq).
		Int("tasks", len(e.st.Tasks)).Int("unsent", e.st.OutboxLen()).Dur("took", time.Since(startedAt)).Msg("projection recovered")
	pol := e.cfg.Submit
	pol.PollWait, pol.ReturnSpread = e.cfg.PollWait, unreachablePoll // what the poller does: a hang's return is judged by it
	e.sub = submit.New(pol)
	e.restorePlace()
	e.inbox.ready.Store(true)
	return nil
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
