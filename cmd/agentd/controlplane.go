package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
)

type controlplaneCmd struct {
	Listen        string        `default:"127.0.0.1:8080" help:"Address to serve the protocol and the operator API on."`
	TokenFile     string        `help:"File holding the bearer token every request must carry (none: no authentication)."`
	ThrottleRPS   float64       `name:"throttle-rps" help:"Throttle state-change reports to this many requests per second (token bucket, 429 + Retry-After). 0: off."`
	ThrottleBurst int           `help:"Token bucket size for --throttle-rps (default 1)."`
	RetryAfter    string        `name:"retry-after" default:"turn" enum:"turn,next-token,none" help:"What a 429's Retry-After names: turn (the time to this client's turn: clients throttled together get distinct turns at the throttle's rate), next-token (the time to the bucket's next token, the same for all) or none (no Retry-After header: the client backs off on its own)."`
	FailRate      float64       `help:"Share of agent requests answered 503 (0..1)."`
	DropRate      float64       `help:"Share of agent requests whose connection is cut mid-request (0..1)."`
	Latency       time.Duration `help:"Latency added to every agent request."`
	ResendAcked   bool          `help:"After a broken poll, re-send acknowledged payloads of tasks not yet known STOPPED (the reconnect of the seed's bug)."`
	logFlags
}

func (c *controlplaneCmd) Run(ctx context.Context) error {
	for name, v := range map[string]float64{"--fail-rate": c.FailRate, "--drop-rate": c.DropRate} {
		if v < 0 || v > 1 {
			return fmt.Errorf("%s %v: want a share between 0 and 1", name, v)
		}
	}
	if c.ThrottleRPS < 0 || c.ThrottleBurst < 0 || c.Latency < 0 {
		return fmt.Errorf("--throttle-rps, --throttle-burst and --latency must not be negative")
	}
	log, err := c.logger("controlplane")
	if err != nil {
		return err
	}
	if err := controlplane.CheckRetryAfter(c.RetryAfter); err != nil {
		return fmt.Errorf("--%w", err)
	}
	s := controlplane.New(c.TokenFile, controlplane.Faults{ThrottleRPS: c.ThrottleRPS, ThrottleBurst: c.ThrottleBurst, RetryAfter: c.RetryAfter,
		FailRate: c.FailRate, DropRate: c.DropRate, Latency: c.Latency, ResendAcked: c.ResendAcked})
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", c.Listen, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Info().Str("listen", ln.Addr().String()).Float64("throttle_rps", c.ThrottleRPS).Str("retry_after", c.RetryAfter).Float64("fail_rate", c.FailRate).
		Float64("drop_rate", c.DropRate).Bool("resend_acked", c.ResendAcked).Msg("reference control plane serving (development and test tool, in memory)")
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
