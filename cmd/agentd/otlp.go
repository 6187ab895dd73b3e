package main

import (
	"context"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/otlpship"
)

// otlpShipping is the journal's shipping to an OTLP endpoint while the agent runs
// (PROTOCOL.md 1.2 §5). It runs beside the engine's loop and shares nothing with it but the
// journal, which it only reads (and one meta key for its position): it never blocks a commit.
type otlpShipping struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startOTLP starts shipping when --otlp-endpoint or the OTEL_EXPORTER_OTLP_* variables ask for
// it; nil when nothing does. A bad setting refuses the start, naming it.
func startOTLP(ctx context.Context, flag string, j *journal.Journal, eng *engine.Engine, agentID string, log zerolog.Logger) (*otlpShipping, error) {
	ep, ok, err := otlpship.ResolveEndpoint(flag, os.Getenv)
	if err != nil || !ok {
		return nil, err
	}
	res, err := otlpship.ResourceAttributes(os.Getenv)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	eng.RegisterDegradedSource(engine.HealthOTLP)
	s, err := otlpship.New(j, otlpship.Config{Endpoint: ep, AgentID: agentID, Version: buildVersion().Version, HostName: host,
		Resource: res, Log: log.With().Str("component", "otlp").Logger(),
		Health: func(problem string) { eng.SetDegraded(engine.HealthOTLP, problem) }})
	if err != nil {
		return nil, err
	}
	eng.Metrics().Registry.MustRegister(s.Collector())
	sctx, cancel := context.WithCancel(ctx)
	o := &otlpShipping{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		if err := s.Run(sctx); err != nil {
			log.Error().Err(err).Msg("otlp: shipping stopped")
			eng.SetDegraded(engine.HealthOTLP, "shipping stopped: "+err.Error())
		}
	}()
	if strings.HasPrefix(ep.URL, "http://") && len(ep.Headers) > 0 {
		// Headers often carry an API key: say so when they travel in the clear (a sidecar
		// Collector on loopback is fine; one across the network is not).
		log.Warn().Str("endpoint", ep.URL).Msg("otlp: OTEL_EXPORTER_OTLP_HEADERS are sent over plain http; use https unless the Collector is on this host")
	}
	log.Info().Str("endpoint", ep.URL).Msg("shipping the journal as OTLP logs")
	return o, nil
}

// stop ends shipping and waits for its position to be written, before the journal closes.
func (o *otlpShipping) stop() {
	if o == nil {
		return
	}
	o.cancel()
	<-o.done
}
