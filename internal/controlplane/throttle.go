package controlplane

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The throttle is a fleet-wide token bucket on state-change requests (Faults.ThrottleRPS,
// ThrottleBurst): a request finds a token or is answered 429 with Retry-After. What
// Retry-After names is the throttle's mode (Faults.RetryAfter):
//   - turn (the default): the time to *this client's* turn. A throttled request reserves the
//     next token nobody holds — the throttle's tokens go into debt, as golang.org/x/time/rate's
//     reservations do — so clients throttled together are told distinct turns one 1/rps
//     apart, in the order they asked: Retry-After is ≈ the client's place in the queue ÷ rps.
//     A client that comes back at or after its turn is served on the token it holds; one that
//     comes back early is told the rest of the same turn (it keeps its place, gains none); a
//     turn not claimed within turnHold is given up (its token stays spent: a client that
//     vanishes can only leave capacity unused, never let the throttle exceed its rate).
//   - next-token: the time until the bucket's next token, the same for every client throttled
//     at that moment (what a token bucket in a proxy or gateway names).
//   - none: no Retry-After at all (a throttling error that names nothing, as some backends
//     answer; protocol 1.3 allows it): the client backs off on its own.
//
// Whatever the mode the rate holds: at most burst + rps × t requests served in any t, and Retry-After
// is a floor the agent may wait longer than (PROTOCOL.md §3), never a promise it waits less.

// Retry-After modes.
const (
	RetryAfterTurn      = "turn"
	RetryAfterNextToken = "next-token"
	RetryAfterNone      = "none"
)

// RetryAfterModes are the throttle's modes, the default first.
var RetryAfterModes = []string{RetryAfterTurn, RetryAfterNextToken, RetryAfterNone}

// CheckRetryAfter refuses a Retry-After mode the throttle does not know ("" is turn).
func CheckRetryAfter(mode string) error {
	if mode != "" && !slices.Contains(RetryAfterModes, mode) {
		return fmt.Errorf("retry-after %q: want %s", mode, strings.Join(RetryAfterModes, ", "))
	}
	return nil
}

// turnHold is how long after its turn a throttled client keeps it: long enough for an agent's
// jitter after Retry-After and a slow network, short enough that the turns of vanished clients
// do not pile up.
const turnHold = 30 * time.Second

// Throttle is the token bucket, with the clock given on every call (the simulation and the
// fleet model run it on a virtual clock). Not safe for concurrent use: the server's lock
// guards it.
type Throttle struct {
	rps      float64
	burst    int
	mode     string  // RetryAfterTurn, RetryAfterNextToken or RetryAfterNone
	tokens   float64 // below zero: tokens already promised to turns not yet due
	refilled time.Time
	turns    map[string]time.Time // client → the turn it holds (its token already spent)
	swept    time.Time
}

// NewThrottle returns a full bucket of burst tokens refilled at rps (0: no throttling) in the
// given mode ("" is turn).
func NewThrottle(rps float64, burst int, mode string) (*Throttle, error) {
	if err := CheckRetryAfter(mode); err != nil {
		return nil, err
	}
	if rps > 0 && burst <= 0 {
		burst = 1
	}
	if mode == "" {
		mode = RetryAfterTurn
	}
	return &Throttle{rps: rps, burst: burst, mode: mode, tokens: float64(burst), turns: map[string]time.Time{}}, nil
}

// Take serves client's request at now, or says how long it must wait (the Retry-After; 0 in
// mode none, which names nothing).
func (t *Throttle) Take(now time.Time, client string) (bool, time.Duration) {
	if t.rps <= 0 {
		return true, 0
	}
	if !t.refilled.IsZero() && now.After(t.refilled) {
		t.tokens = min(float64(t.burst), t.tokens+now.Sub(t.refilled).Seconds()*t.rps)
	}
	if now.After(t.refilled) {
		t.refilled = now
	}
	t.sweep(now)
	if turn, ok := t.turns[client]; ok {
		if now.Before(turn) {
			return false, turn.Sub(now)
		}
		delete(t.turns, client)
		return true, 0
	}
	if t.tokens >= 1 {
		t.tokens--
		return true, 0
	}
	switch t.mode {
	case RetryAfterNextToken:
		return false, time.Duration((1 - t.tokens) / t.rps * float64(time.Second))
	case RetryAfterNone:
		return false, 0
	}
	if -t.tokens >= t.rps*turnHold.Seconds() {
		// The queue is turnHold deep: hand out no further turns (a flood of clients, or of
		// made-up agent ids, cannot book the throttle's next minutes); say when it ends.
		return false, time.Duration((1 - t.tokens) / t.rps * float64(time.Second))
	}
	// Reserve the next token nobody holds: it is whole when the debt, this one included, is
	// paid back at rps.
	t.tokens--
	turn := now.Add(time.Duration(-t.tokens / t.rps * float64(time.Second)))
	t.turns[client] = turn
	return false, turn.Sub(now)
}

// sweep forgets turns not claimed within turnHold, at most once a second.
func (t *Throttle) sweep(now time.Time) {
	if len(t.turns) == 0 || now.Sub(t.swept) < time.Second {
		return
	}
	t.swept = now
	for c, turn := range t.turns {
		if now.Sub(turn) > turnHold {
			delete(t.turns, c)
		}
	}
}

// SetThrottle changes the state-change throttle (rps 0: none), its bucket full again and
// every turn forgotten; the Retry-After mode stays.
func (s *Server) SetThrottle(rps float64, burst int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle, _ = NewThrottle(rps, burst, s.throttle.mode)
}
