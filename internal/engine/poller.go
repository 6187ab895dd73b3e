package engine

import (
	"context"
	"errors"
	"time"
)

// poller long-polls the control plane, hands each payload to the loop, and acknowledges it
// only once the loop says it is journaled. Poll errors (not JSON, too large, refused, broken)
// are logged with their cause and retried with backoff; the agent keeps running.
func (e *Engine) poller(ctx context.Context) {
	defer e.wg.Done()
	bo := newBackoff(250*time.Millisecond, 30*time.Second, e.cfg.Seed+2)
	fail := func(err error, what string) {
		wait := bo.next()
		e.log.Warn().Err(err).Dur("retry_in", wait).Msg(what)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
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
		if len(payloads) == 0 {
			bo.reset()
			continue
		}
		// The whole poll goes to the loop as one input, so its payloads are journaled in one
		// burst and one commit — not a commit each, which made admitting tasks cost a commit
		// per task and bounded a busy host by its fsync latency — and all or none, in order,
		// so no payload is journaled behind a later one of the same poll that failed.
		done := make(chan error, 1)
		select {
		case e.inputs <- PollInput{Payloads: payloads, Done: done}:
		case <-ctx.Done():
			return
		}
		select {
		case err = <-done:
		case <-ctx.Done():
			return
		}
		if err != nil {
			fail(errors.New("journal refused a poll's payloads"), "payloads not journaled; not acknowledged")
			continue
		}
		var ack []string
		for _, p := range payloads {
			if p.MessageID != "" {
				ack = append(ack, p.MessageID)
			}
		}
		if len(ack) > 0 {
			if err := e.cp.Ack(ctx, ack); err != nil && ctx.Err() == nil {
				e.log.Warn().Err(err).Strs("messages", ack).Msg("ack failed; the control plane will re-send and the journal de-duplicates")
			}
		}
		bo.reset()
	}
}
