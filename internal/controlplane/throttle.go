package controlplane

import (
	"time"
)

// The throttle is a fleet-wide token bucket on state-change requests (Faults.ThrottleRPS,
// ThrottleBurst): a request finds a token or is answered 429 with Retry-After, the time until
// one is there. Retry-After is a floor for the agent (PROTOCOL.md §3), never a promise.

// take spends a throttling token, or says how long until one is there.
func (s *Server) takeLocked(now time.Time) (bool, time.Duration) {
	if s.faults.ThrottleRPS <= 0 {
		return true, 0
	}
	if !s.refilled.IsZero() {
		s.tokens = min(float64(s.faults.ThrottleBurst), s.tokens+now.Sub(s.refilled).Seconds()*s.faults.ThrottleRPS)
	}
	s.refilled = now
	if s.tokens >= 1 {
		s.tokens--
		return true, 0
	}
	return false, time.Duration((1 - s.tokens) / s.faults.ThrottleRPS * float64(time.Second))
}

// SetThrottle changes the state-change throttle (rps 0: none), its bucket full again.
func (s *Server) SetThrottle(rps float64, burst int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rps > 0 && burst <= 0 {
		burst = 1
	}
	s.faults.ThrottleRPS, s.faults.ThrottleBurst = rps, burst
	s.tokens, s.refilled = float64(burst), time.Time{}
}
