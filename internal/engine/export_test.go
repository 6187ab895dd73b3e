package engine

import (
	"context"

	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// Hooks for the package's external tests (engine_test), compiled into tests only.

// Observed is the one mapping of the runtime's view of a container into the core's terms.
var Observed = observed

// Dispatch runs one burst that dispatches a as if the core had decided it: a way to hand the
// engine a decision the core would not make (a bug in the core), to see the engine's guard.
func (e *Engine) Dispatch(a fsm.Action) Ready {
	e.beginBurst(context.Background())
	e.dispatch(e.clock.Now(), a)
	r, _ := e.endBurst()
	return r
}

// JournalPayload runs one burst that journals v as the core's verdict on the payload with message id
// m: a way to hand the engine payload records the projection refuses (a bug in the core).
func (e *Engine) JournalPayload(m string, v fsm.Verdict) Ready {
	e.beginBurst(context.Background())
	e.journalPayload(PayloadInput{Payload: protocol.Payload{MessageID: m}}, v)
	r, _ := e.endBurst()
	return r
}
