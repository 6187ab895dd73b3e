package engine

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/runtime"
)

// watchExits follows the runtime's exit stream and resubscribes at the last cursor when it
// ends, with backoff, until ctx ends. It owns the exit stream's health slot. A resumed stream
// gives again the exits at its cursor (a second container may have exited in that same
// nanosecond): those this watcher handed in already are dropped (runtime.ExitMark). After a
// restart the mark is gone and the core drops the repeats (an exit of a container that is not
// RUNNING records nothing).
func (e *Engine) watchExits(ctx context.Context) {
	defer e.inbox.wg.Done()
	bo := jitter.NewBackoff(250*time.Millisecond, 30*time.Second, jitter.Rand(e.cfg.Seed+3))
	mark := runtime.ExitMark{Cursor: e.exits.from}
	for ctx.Err() == nil {
		began := e.clock.Now()
		ch, err := e.rt.Exits(ctx, mark.Cursor)
		if err != nil {
			e.log.Warn().Err(err).Msg("runtime event stream unavailable; retrying")
			e.setHealth(HealthExitStream, err.Error())
		} else {
			e.clearHealth(HealthExitStream)
			for x := range ch {
				if mark.Taken(x) {
					continue
				}
				mark.Take(x)
				select {
				case e.inbox.in <- ExitInput{Exit: x}:
				case <-ctx.Done():
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
			if !e.stayedUp(began) {
				e.setHealth(HealthExitStream, "the runtime's event stream keeps breaking (is the engine down?)")
			} else {
				bo.Reset()
			}
			e.log.Warn().Msg("runtime event stream ended; resubscribing from the last exit seen")
		}
		select {
		case <-ctx.Done():
			return
		case <-e.clock.After(bo.NextBackOff()): // the engine's clock: a test steps it (backoff_test.go)
		}
	}
}

// stayedUp says whether a runtime stream subscribed at began worked: one that stayed up a
// second ends its streak of failures (its backoff starts over); one that broke at once counts
// as a failure — the engine is down, or refuses the subscription — so resubscribing does not
// spin at the first backoff.
func (e *Engine) stayedUp(began time.Time) bool { return e.clock.Now().Sub(began) >= time.Second }

// watchHealth follows the runtime's health verdicts and resubscribes when the stream ends,
// with backoff, until ctx ends: a stream that stayed up ends the backoff, like the exit
// stream's. Every subscription repeats the current verdicts; the core records a verdict only
// when it changed.
func (e *Engine) watchHealth(ctx context.Context) {
	defer e.inbox.wg.Done()
	bo := jitter.NewBackoff(250*time.Millisecond, 30*time.Second, jitter.Rand(e.cfg.Seed+4))
	for ctx.Err() == nil {
		began := e.clock.Now()
		ch, err := e.rt.Health(ctx)
		if err == nil {
			for h := range ch {
				select {
				case e.inbox.in <- HealthInput{Change: h}:
				case <-ctx.Done():
					return
				}
			}
			if e.stayedUp(began) {
				bo.Reset()
			}
		} else {
			e.log.Warn().Err(err).Msg("runtime health stream unavailable; retrying")
		}
		select {
		case <-ctx.Done():
			return
		case <-e.clock.After(bo.NextBackOff()): // the engine's clock: a test steps it (backoff_test.go)
		}
	}
}
