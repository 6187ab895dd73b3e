package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// poller long-polls the control plane, hands each payload to the loop, and acknowledges it
// only once the loop says it is journaled. Poll errors (not JSON, too large, refused, broken)
// are logged with their cause and retried with backoff; the agent keeps running.
func (e *Engine) poller(ctx context.Context) {
	defer e.wg.Done()
	wait := 250 * time.Millisecond
	fail := func(err error, what string) {
		e.log.Warn().Err(err).Dur("retry_in", wait).Msg(what)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(float64(wait) * (0.5 + e.jitter()))):
		}
		wait = min(wait*2, 30*time.Second)
	}
	for ctx.Err() == nil {
		payloads, err := e.cp.Poll(ctx, e.cfg.PollWait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var answered interface{ HTTPStatus() int }
			if errors.As(err, &answered) && answered.HTTPStatus() != 0 {
				e.metrics.pollErrors.WithLabelValues("http").Inc()
			} else {
				e.metrics.pollErrors.WithLabelValues("transport").Inc()
			}
			fail(err, "poll failed")
			continue
		}
		var ack []string
		ok := true
		for _, p := range payloads {
			done := make(chan error, 1)
			select {
			case e.inputs <- PayloadInput{Payload: p, Done: done}:
			case <-ctx.Done():
				return
			}
			var err error
			select {
			case err = <-done:
			case <-ctx.Done():
				return
			}
			if err != nil {
				ok = false
				break
			}
			if p.MessageID != "" {
				ack = append(ack, p.MessageID)
			}
		}
		if len(ack) > 0 {
			if err := e.cp.Ack(ctx, ack); err != nil && ctx.Err() == nil {
				e.log.Warn().Err(err).Strs("messages", ack).Msg("ack failed; the control plane will re-send and the journal de-duplicates")
			}
		}
		if !ok {
			fail(errors.New("journal refused a payload"), "payload not journaled; not acknowledged")
			continue
		}
		wait = 250 * time.Millisecond
	}
}

// jitter draws from the global generator (safe for concurrent use): the loop's own seeded
// generator belongs to the loop's goroutine, and the poller runs beside it.
func (e *Engine) jitter() float64 { return rand.Float64() }

// watchExits follows the runtime's exit stream and resubscribes from the last cursor when it
// ends, with backoff, until ctx ends.
func (e *Engine) watchExits(ctx context.Context) {
	defer e.wg.Done()
	wait := 250 * time.Millisecond
	// Resume from the journaled cursor (the last exit the journal holds from the stream), but
	// never from later than a little before recovery began: reconciliation covered the time
	// the agent was down, and the overlap covers the moments between reconciling and
	// subscribing. Exits are journaled once however often they are seen.
	cursor := e.startedAt.Add(-time.Second).UnixNano()
	if c := e.journaledCursor; c > 0 && c < cursor {
		cursor = c
	}
	for ctx.Err() == nil {
		began := time.Now()
		ch, err := e.rt.Exits(ctx, cursor)
		if err != nil {
			e.log.Warn().Err(err).Msg("runtime event stream unavailable; retrying")
			e.setHealth(HealthExitStream, err.Error())
		} else {
			e.clearHealth(HealthExitStream)
			for x := range ch {
				cursor = max(cursor, x.Cursor)
				select {
				case e.inputs <- ExitInput{Exit: x}:
				case <-ctx.Done():
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
			if time.Since(began) < time.Second {
				e.setHealth(HealthExitStream, "the runtime's event stream keeps breaking (is the engine down?)")
			} else {
				wait = 250 * time.Millisecond
			}
			e.log.Warn().Dur("retry_in", wait).Msg("runtime event stream ended; resubscribing from the last exit seen")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, 30*time.Second)
	}
}
