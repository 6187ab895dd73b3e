package engine_test

import (
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
)

// A degraded-only source (the OTLP shipping) shows its problem but never makes the agent
// unhealthy: /healthz and agentd_healthy stay good while a log pipeline is down.
func TestDegradedSourceNeverMakesTheAgentUnhealthy(t *testing.T) {
	r := newRig(t, time.Hour)
	r.e.RegisterDegradedSource(engine.HealthOTLP)
	r.e.SetDegraded(engine.HealthOTLP, "http://c:4318/v1/logs answered 503")
	if u := r.e.Unhealthy(); u != "" {
		t.Fatalf("Unhealthy() = %q with only the otlp slot degraded, want healthy", u)
	}
	slots := r.e.Health()
	last := slots[len(slots)-1]
	if last.Source != engine.HealthOTLP || !last.Degraded || last.Problem == "" {
		t.Fatalf("otlp slot %+v, want listed last, degraded, with its problem", last)
	}
	r.e.SetDegraded(engine.HealthOTLP, "")
	if s := r.e.Health()[len(slots)-1]; s.Problem != "" || s.Source != engine.HealthOTLP {
		t.Fatalf("after clearing: %+v", s)
	}
}
