package engine

import (
	"context"

	"github.com/agentd/agentd/internal/submit"
)

// PlaceKey names the journal meta value that keeps the reporter's place in the fleet across a
// restart (submit.Place: Stop gives it, Restart takes it back). It is a hint, not state: the
// projection never reads it, a crash keeps the place of the last clean stop, and a value that
// cannot be used (malformed, past what an agent learns, or stale) is dropped with a warning
// and overwritten at the next clean stop — the agent learns its place again from the
// throttle, as a new agent does.
const PlaceKey = "submit_place"

// restorePlace gives the new submitter the place the journal keeps.
func (e *Engine) restorePlace() {
	v, err := e.j.Meta(PlaceKey)
	if err != nil || v == "" {
		if err != nil {
			e.log.Warn().Err(err).Msgf("journal meta %s not read; the place in the fleet is learnt again", PlaceKey)
		}
		return
	}
	p, err := submit.ParsePlace(v)
	if err == nil {
		err = e.sub.step(e.clock.Now(), submit.Restart{Place: p}).Refused
	}
	if err != nil {
		e.log.Warn().Err(err).Msgf("journal meta %s not restored; the place in the fleet is learnt again", PlaceKey)
	}
}

// keepPlace writes the submitter's place to the journal's meta at a clean stop, in a commit of
// its own before agent_stopped's: at every clean stop once there is one, so its age is how long
// the agent was down; and it clears a value the journal holds when there is none (nothing
// learnt, or a value that could not be used). An agent that never met a throttle writes
// nothing.
func (e *Engine) keepPlace(ctx context.Context) {
	if e.sub == nil {
		return
	}
	p := e.sub.step(e.clock.Now(), submit.Stop{}).Keep
	v := p.String()
	if !p.Learnt() {
		if kept, _ := e.j.Meta(PlaceKey); kept == "" {
			return
		}
		v = "" // cleared: nothing to keep, nor to write again
	}
	if err := e.j.SetMeta(ctx, PlaceKey, v); err != nil {
		e.log.Warn().Err(err).Msgf("journal meta %s not written; the place in the fleet is learnt again after the restart", PlaceKey)
	}
}
