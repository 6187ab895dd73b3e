package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/event"
)

// reconcile compares the projection with the runtime after a restart: containers that exited
// while the agent was down are journaled as exited with their exit codes; a container the
// runtime no longer has is journaled STOPPED with a reason; a container created but never
// journaled (a crash between create and journaling its id) is adopted, not created again;
// containers of this agent that the journal does not know are logged and left alone.
func (e *Engine) reconcile(ctx context.Context) error {
	owned, err := e.rt.List(ctx)
	if err != nil {
		return fmt.Errorf("engine: reconcile with the %s runtime: %w", e.rt.Name(), err)
	}
	byID := map[string]docker.State{}
	for _, s := range owned {
		byID[s.ID] = s
	}
	known := map[string]bool{}
	var recs []event.Record
	for _, t := range e.st.SortedTasks() {
		if t.Known.Rank() >= event.StatusStopped.Rank() {
			for _, c := range t.Containers {
				known[c.RuntimeID] = true
			}
			continue
		}
		for _, c := range t.Containers {
			rec := event.Record{Task: t.ARN, Container: c.Name}
			if c.Known == event.StatusPulled && c.RuntimeID == "" {
				if s, err := e.rt.Find(ctx, t.ARN, c.Name); err == nil {
					rec.Event = &event.ContainerTransitioned{From: c.Known, To: event.StatusCreated, RuntimeID: s.ID, Reason: "adopted after restart"}
					recs = append(recs, rec)
					known[s.ID] = true
				}
				continue
			}
			if c.RuntimeID == "" || (c.Known != event.StatusCreated && c.Known != event.StatusRunning) {
				continue
			}
			known[c.RuntimeID] = true
			s, ok := byID[c.RuntimeID]
			if !ok {
				if _, err := e.rt.Inspect(ctx, c.RuntimeID); !errors.Is(err, docker.ErrNotFound) {
					continue // not listed but present, or the runtime hiccuped: leave it to the event stream
				}
				rec.Event = &event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: "container vanished from the runtime while the agent was down"}
				recs = append(recs, rec)
				continue
			}
			switch {
			case s.Exited && c.Known == event.StatusRunning:
				code := s.ExitCode
				rec.Event = &event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, ExitCode: &code, Reason: "exited while the agent was down"}
				recs = append(recs, rec)
			case s.Exited && c.Known == event.StatusCreated:
				code := s.ExitCode
				recs = append(recs, event.Record{Task: t.ARN, Container: c.Name, Event: &event.ContainerTransitioned{From: c.Known, To: event.StatusRunning}},
					event.Record{Task: t.ARN, Container: c.Name, Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: &code, Reason: "exited while the agent was down"}})
			case s.Running && c.Known == event.StatusCreated:
				rec.Event = &event.ContainerTransitioned{From: c.Known, To: event.StatusRunning, Reason: "found running after restart"}
				recs = append(recs, rec)
			}
		}
	}
	for _, t := range e.st.Tasks {
		for _, c := range t.Containers {
			known[c.RuntimeID] = true
		}
	}
	for _, s := range owned {
		if !known[s.ID] {
			e.log.Warn().Str("id", s.ID).Str("task", s.Task).Str("container", s.Container).Msg("container of this agent unknown to the journal; left alone")
		}
	}
	if len(recs) == 0 {
		return nil
	}
	if _, err := e.commit(ctx, recs...); err != nil {
		return fmt.Errorf("engine: reconcile: %w", err)
	}
	e.log.Info().Int("records", len(recs)).Msg("runtime reconciled")
	return nil
}
