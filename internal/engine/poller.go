package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// poller long-polls the control plane, hands each poll's payloads to the loop, and
// acknowledges them only once the loop answers: journaled, and among its burst's Acks. Poll errors (not JSON, too large, refused, broken)
// are retried with backoff and logged once per streak of one kind, with their cause; the agent
// keeps running. Every answered poll, even an empty one, goes to the loop: it ends the
// reporter's outage backoff (submit.Answered). After a failed poll the next asks for no wait,
// so the control plane's return is known at once rather than a long poll later; and an answer
// to a report ends the poller's own backoff (answered).
func (e *Engine) poller(ctx context.Context) {
	defer e.inbox.wg.Done()
	bo := newBackoff(250*time.Millisecond, 30*time.Second, seededRand(e.cfg.Seed+2))
	var streak string // the kind of the current failure streak ("" while polls work)
	var failures int
	fail := func(err error, kind, what string) {
		wait := bo.NextBackOff()
		failures++
		if kind != streak {
			e.log.Warn().Err(err).Dur("retry_in", wait).Msg(what)
			streak = kind
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		case <-e.inbox.answered:
			bo.Reset() // a report was answered: the control plane is back
		}
	}
	for ctx.Err() == nil {
		wait := e.cfg.PollWait
		if streak != "" {
			wait = 0
		}
		payloads, err := e.cp.Poll(ctx, wait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var answered interface{ HTTPStatus() int }
			if errors.As(err, &answered) && answered.HTTPStatus() != 0 {
				e.metrics.pollErrors.WithLabelValues("http").Inc()
				fail(err, fmt.Sprintf("HTTP %d", answered.HTTPStatus()), "poll failed")
			} else {
				e.metrics.pollErrors.WithLabelValues("transport").Inc()
				fail(err, "transport", "poll failed")
			}
			continue
		}
		if streak != "" {
			e.log.Info().Int("failures", failures).Msg("polls answered again")
			streak, failures = "", 0
		}
		if len(payloads) == 0 {
			select {
			case e.inbox.in <- PollInput{}: // an answer: the reporter's outage is over
			case <-ctx.Done():
				return
			}
			bo.Reset()
			continue
		}
		// The whole poll goes to the loop as one input, so its payloads are journaled in one
		// burst and one commit — not a commit each, which made admitting tasks cost a commit
		// per task and bounded a busy host by its fsync latency — and all or none, in order,
		// so no payload is journaled behind a later one of the same poll that failed.
		done := make(chan error, 1)
		select {
		case e.inbox.in <- PollInput{Payloads: payloads, Done: done}:
		case <-ctx.Done():
			return
		}
		select {
		case err = <-done:
		case <-ctx.Done():
			return
		}
		if err != nil {
			fail(errors.New("journal refused a poll's payloads"), "journal", "payloads not journaled; not acknowledged")
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
		bo.Reset()
	}
}
