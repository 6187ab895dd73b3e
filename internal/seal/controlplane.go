package seal

import (
	"context"
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

// ControlPlane is the engine's control-plane client (engine.ControlPlane), restated here so
// that this package needs nothing of the engine.
type ControlPlane interface {
	Poll(ctx context.Context, wait time.Duration) ([]protocol.Payload, error)
	Ack(ctx context.Context, ids []string) error
	Report(ctx context.Context, changes []protocol.StateChange) protocol.ReportResult
}

// SealingControlPlane wraps a control-plane client so that every payload it returns carries
// env values sealed: the engine, and so the journal, never holds one in the clear.
type SealingControlPlane struct {
	Inner ControlPlane
	Key   *Key
}

// Poll polls the inner client and seals what it returns. An error of the inner poll is
// returned unchanged (the engine classifies it).
func (s SealingControlPlane) Poll(ctx context.Context, wait time.Duration) ([]protocol.Payload, error) {
	ps, err := s.Inner.Poll(ctx, wait)
	if err != nil {
		return nil, err
	}
	out := make([]protocol.Payload, len(ps))
	for i, p := range ps {
		if out[i], err = s.Key.SealPayload(p); err != nil {
			// Nothing is acknowledged: the control plane sends the payload again.
			return nil, fmt.Errorf("poll: sealing payload %s: %w", p.MessageID, err)
		}
	}
	return out, nil
}

// Ack passes through.
func (s SealingControlPlane) Ack(ctx context.Context, ids []string) error {
	return s.Inner.Ack(ctx, ids)
}

// Report passes through.
func (s SealingControlPlane) Report(ctx context.Context, changes []protocol.StateChange) protocol.ReportResult {
	return s.Inner.Report(ctx, changes)
}
