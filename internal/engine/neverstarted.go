package engine

import (
	"github.com/agentd/agentd/internal/event"
)

// What a runtime holds for a container's start is let go once the container is durably
// recorded stopped without having started (its task stopped first: a dependency unmet, the
// control plane's stop): a container is never started after its STOPPED (DESIGN.md "What
// must hold" 7), so nothing will use it — and the Docker runtime's bind descriptors would
// otherwise stay open until the task's cleanup, hours later. Only after the commit: before
// it, a failed commit would leave the container CREATED and its start still to come.

// neverStarted tells the runtime of each container the committed records stopped from
// CREATED (runtime.Runtime.NeverStarted).
func (e *Engine) neverStarted(recs []event.Record) {
	for _, r := range recs {
		ev, ok := r.Event.(*event.ContainerTransitioned)
		if !ok || ev.From != event.StatusCreated || ev.To != event.StatusStopped {
			continue
		}
		if t := e.st.Tasks[r.Task]; t != nil {
			if c := t.Container(r.Container); c != nil && c.RuntimeID != "" {
				e.rt.NeverStarted(c.RuntimeID)
			}
		}
	}
}
