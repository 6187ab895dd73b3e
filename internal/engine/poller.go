package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/protocol"
)

// poller long-polls the control plane, hands each poll's payloads to the loop, and
// acknowledges them only once the loop answers: journaled, and among its burst's Acks. Poll
// errors (not JSON, too large, refused, broken) are retried with backoff and logged once per
// streak of one kind, with their cause; the agent keeps running. Every answered poll, even an
// empty one, goes to the loop: it ends the reporter's outage backoff (submit.Polled). After
// a failed poll the next asks for no wait, so the control plane's return is known at once
// rather than a long poll later; an answer to a report ends the poller's own backoff
// (answered); and the loop cuts a long poll begun before a burst its host began (livePoll), so
// a hang the control plane is in holds the poll begun in its place.
func (e *Engine) poller(ctx context.Context) {
	defer e.inbox.wg.Done()
	rng := jitter.Rand(e.cfg.Seed + 2) // the poller's own: it runs on a goroutine of its own
	s := pollStreak{e: e, rng: rng, bo: jitter.NewBackoff(250*time.Millisecond, 30*time.Second, rng)}
	for ctx.Err() == nil {
		wait := e.cfg.PollWait
		if s.kind != "" {
			wait = 0
		}
		e.holdIntake(ctx)
		began := e.clock.Now()
		pollCtx, cancel := context.WithCancel(ctx)
		e.inbox.poll.begin(cancel)
		payloads, err := e.cp.Poll(pollCtx, wait)
		cut := e.inbox.poll.end()
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if cut {
				continue // cut by the loop to poll afresh (livePoll): not a failure
			}
			s.held = e.clock.Now().Sub(began) >= heldPoll
			var answered interface{ HTTPStatus() int }
			if errors.As(err, &answered) && answered.HTTPStatus() != 0 {
				e.metrics.pollErrors.WithLabelValues("http").Inc()
				s.fail(ctx, err, fmt.Sprintf("HTTP %d", answered.HTTPStatus()), "poll failed")
			} else {
				e.metrics.pollErrors.WithLabelValues("transport").Inc()
				s.fail(ctx, err, "transport", "poll failed")
			}
			continue
		}
		outage := s.kind == "transport"
		held := outage && s.held
		s.answered()
		// The whole poll goes to the loop as one input, so its payloads are journaled in one
		// burst and one commit — not a commit each, which made admitting tasks cost a commit
		// per task and bounded a busy host by its fsync latency — and all or none, in order,
		// so no payload is journaled behind a later one of the same poll that failed. An
		// empty poll goes too: an answer, the reporter's outage is over.
		journaled, err := e.handOver(ctx, payloads, outage, held)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.fail(ctx, errors.New("journal refused a poll's payloads"), "journal", "payloads not journaled; not acknowledged")
			continue
		case journaled:
			e.acknowledge(ctx, payloads)
		}
		s.bo.Reset()
	}
}

// livePoll is the poll in flight, which the loop cuts when a burst its host began waits for
// the agent's slot (submit.Plan.Repoll): a long poll begun before a hanging outage is answered
// as ever after it, and its agent would never learn of the hang; the poll begun in its place
// is held in it and cut at the return with every other request. A cut poll is not a failure:
// the poller asks again at once. A cut between polls cuts nothing: the next poll is begun
// after the burst anyway.
type livePoll struct {
	mu     sync.Mutex
	cancel context.CancelFunc // nil between polls
	cutOff bool               // the poll in flight was cut
}

func (l *livePoll) begin(cancel context.CancelFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel, l.cutOff = cancel, false
}

// end says whether the poll that just ended was cut.
func (l *livePoll) end() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel = nil
	return l.cutOff
}

func (l *livePoll) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
		l.cutOff = true
	}
}

// unreachablePoll is the longest wait between polls that found the control plane unreachable.
const unreachablePoll = 2 * time.Second

// heldPoll is how long a poll must have been on its way before failing at the transport to
// count as held by a hanging control plane and cut (a refused connection fails in
// milliseconds): every agent held in a hang learns of its return at one instant
// (submit.Polled.Held).
const heldPoll = 100 * time.Millisecond

// pollStreak is the poller's failures in a row: their kind ("" while polls work), how many,
// and the backoff between them.
type pollStreak struct {
	e        *Engine
	bo       *jitter.Backoff
	rng      *rand.Rand // bo's generator, for the waits it spreads outside the backoff
	kind     string
	failures int
	held     bool // the last failed poll was held before it failed (heldPoll)
}

// fail waits out the backoff after a failed poll, logging once per streak of one kind; a
// report answered meanwhile ends the wait (the control plane is back).
func (s *pollStreak) fail(ctx context.Context, err error, kind, what string) {
	wait := s.bo.NextBackOff()
	if kind == "transport" && wait > unreachablePoll {
		// While the control plane cannot be reached the poll is the fleet's cheap probe: each
		// agent learns of the return within a few seconds and places its reports from then
		// (submit.Polled), rather than a grown backoff — up to 30 s — later.
		wait = jitter.Spread(s.rng, unreachablePoll)
	}
	s.failures++
	if kind != s.kind {
		s.e.log.Warn().Err(err).Dur("retry_in", wait).Msg(what)
		s.kind = kind
	}
	select {
	case <-ctx.Done():
	case <-s.e.clock.After(wait): // the engine's clock: a test steps it (backoff_test.go)
	case <-s.e.inbox.answered:
		s.bo.Reset()
	}
}

// answered ends a streak: a poll was answered.
func (s *pollStreak) answered() {
	if s.kind != "" {
		s.e.log.Info().Int("failures", s.failures).Msg("polls answered again")
		s.kind, s.failures = "", 0
	}
}

// handOver gives a poll's payloads to the loop and waits for its answer (journaled: there
// were payloads and the loop answered nil).
func (e *Engine) handOver(ctx context.Context, payloads []protocol.Payload, outage, held bool) (bool, error) {
	in := PollInput{Payloads: payloads, Outage: outage, Held: held}
	var done chan error
	if len(payloads) > 0 {
		done = make(chan error, 1)
		in.Done = done
	}
	select {
	case e.inbox.in <- in:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if done == nil {
		return false, nil
	}
	select {
	case err := <-done:
		return err == nil, err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// acknowledge tells the control plane the payloads are journaled; a failure only means it
// re-sends them, and the journal de-duplicates.
func (e *Engine) acknowledge(ctx context.Context, payloads []protocol.Payload) {
	var ack []string
	for _, p := range payloads {
		if p.MessageID != "" {
			ack = append(ack, p.MessageID)
		}
	}
	if len(ack) == 0 {
		return
	}
	if err := e.cp.Ack(ctx, ack); err != nil && ctx.Err() == nil {
		// Logged by their keys, as journaled: a long id as sent would write its whole length
		// at every failed acknowledgement (PROTOCOL sets ids no length).
		keys := make([]string, len(ack))
		for i, m := range ack {
			keys[i] = event.MessageKey(m)
		}
		e.log.Warn().Err(err).Strs("messages", keys).Msg("ack failed; the control plane will re-send and the journal de-duplicates")
	}
}
