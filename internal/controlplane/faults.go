package controlplane

import (
	"net/http"
	"strings"
	"time"
)

// Faults are switched on by flag (Faults): latency before any agent request is served, a
// share answered 503, a share whose connection is cut mid-request. A cut poll counts as a
// reconnect (the agent's next poll may be re-sent acknowledged payloads, ResendAcked), which
// is how the project's tests reproduce the seed's duplicate-run bug.

// fault applies latency, 5xx and dropped connections to an agent request. It reports
// whether the request was answered (so the handler must stop).
func (s *Server) fault(w http.ResponseWriter, r *http.Request, a *agent) bool {
	if s.faults.Latency > 0 {
		select {
		case <-time.After(s.faults.Latency):
		case <-r.Context().Done():
			return true
		}
	}
	s.mu.Lock()
	drop := s.faults.DropRate > 0 && s.rng.Float64() < s.faults.DropRate
	fail := !drop && s.faults.FailRate > 0 && s.rng.Float64() < s.faults.FailRate
	if drop {
		s.stats.Dropped++
		if a != nil && strings.HasSuffix(r.URL.Path, "/payloads") {
			a.broken = true
		}
	}
	if fail {
		s.stats.Failed++
	}
	s.mu.Unlock()
	if drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return true
			}
		}
		panic(http.ErrAbortHandler) // cut the stream where hijacking is not possible (HTTP/2)
	}
	if fail {
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	return false
}
