package engine

import (
	"context"

	"github.com/agentd/agentd/internal/submit"
)

// placeKey names the journal meta value that keeps the reporter's place in the fleet across a
// restart (submit.Place). It is a hint, not state: the projection never reads it, a crash
// loses what was learnt since the last clean stop, and a value that cannot be used is
// dropped with a warning — the agent then learns its place again from the throttle, as a
// new agent does.
const placeKey = "submit_place"

// restorePlace gives the new submitter the place the journal keeps.
func (e *Engine) restorePlace() {
	v, err := e.j.Meta(placeKey)
	if err != nil || v == "" {
		if err != nil {
			e.log.Warn().Err(err).Msgf("journal meta %s not read; the place in the fleet is learnt again", placeKey)
		}
		return
	}
	p, err := submit.ParsePlace(v)
	if err == nil {
		err = e.sub.Restore(p)
	}
	if err != nil {
		e.log.Warn().Err(err).Msgf("journal meta %s not restored; the place in the fleet is learnt again", placeKey)
		return
	}
	e.placeKept = e.sub.Place() // a naive submitter keeps nothing, and so erases nothing
}

// keepPlace writes the submitter's place to the journal's meta at a clean stop, in a commit of
// its own before agent_stopped's, and only when it changed: an agent that never met a
// throttle writes nothing.
func (e *Engine) keepPlace(ctx context.Context) {
	if e.sub == nil {
		return
	}
	p := e.sub.Place()
	if p == e.placeKept {
		return
	}
	if err := e.j.SetMeta(ctx, placeKey, p.String()); err != nil {
		e.log.Warn().Err(err).Msgf("journal meta %s not written; the place in the fleet is learnt again after the restart", placeKey)
		return
	}
	e.placeKept = p
}
