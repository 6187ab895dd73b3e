package engine

import (
	"context"

	"github.com/agentd/agentd/internal/fsm"
)

// Hooks for the package's external tests (engine_test), compiled into tests only.

// Call is a runtime call for an action, its outcome sorted as the core reads it.
var Call = call

// Observed is the one mapping of the runtime's view of a container into the core's terms.
var Observed = observed

// Dispatch runs one burst that dispatches a as if the core had decided it: a way to hand the
// node a decision the core would not make (a bug in the core), to see the node's guard.
func (e *Engine) Dispatch(a fsm.Action) Ready {
	e.beginBurst(context.Background())
	_ = e.node.Step(e.clock.Now(), fsm.Forced{Actions: []fsm.Action{a}})
	r, _ := e.endBurst()
	return r
}

// JournalPayload runs one burst that journals v as the core's verdict on the payload with message id
// m: a way to hand the node payload records the projection refuses (a bug in the core).
func (e *Engine) JournalPayload(m string, v fsm.Verdict) Ready {
	e.beginBurst(context.Background())
	_ = e.node.Step(e.clock.Now(), fsm.Forced{MessageID: m, Verdict: v})
	r, _ := e.endBurst()
	return r
}

// Withhold keeps the action with key k back from the next burst's release: it is never made,
// and the node decides its task again (fsm.Advance.Withheld).
func (e *Engine) Withhold(k fsm.ActionKey) { e.withhold[k] = true }
