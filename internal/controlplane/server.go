// Package controlplane is the reference control plane: PROTOCOL.md served for any number of
// agents, with an operator side to queue and stop tasks and faults that can be switched on
// (throttling, 5xx, dropped connections, latency, re-sent acknowledged payloads). It is a
// development and test tool, kept in memory — but correct: it is what the project's own
// end-to-end and crash tests run against, and it checks the protocol's rules from its side
// (GET /v1/violations).
package controlplane

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

// The server: its whole state under one lock (agents and their payloads, tasks, accepted
// changes, violations, the throttle's bucket, counters), the routes of the agent and operator
// sides, and bearer-token authentication, the token re-read from its file on every request so
// it can be rotated without a restart.

// Faults are off by default.
type Faults struct {
	ThrottleRPS   float64       // state-change requests per second (token bucket); 0: no throttling
	ThrottleBurst int           // bucket size (default 1 when throttling)
	RetryAfter    string        // what a 429's Retry-After names: RetryAfterTurn ("", the default), RetryAfterNextToken or RetryAfterNone (throttle.go)
	FailRate      float64       // share of agent requests answered 503
	DropRate      float64       // share of agent requests whose connection is cut
	Latency       time.Duration // added to every agent request
	ResendAcked   bool          // after a broken poll, re-send acknowledged payloads of tasks not known STOPPED
	Seed          uint64
}

// Server is the reference control plane.
type Server struct {
	tokenFile string
	faults    Faults
	now       func() time.Time

	mu         sync.Mutex
	rng        *rand.Rand
	agents     map[string]*agent
	tasks      map[string]*Task
	accepted   map[string]acceptedChange // change id → what it said
	violations []Violation
	nextMsg    int
	throttle   *Throttle
	stats      Stats
}

// Stats counts what the control plane saw.
type Stats struct {
	Polls, PayloadsSent, Acks, Reports, Throttled, Failed, Dropped, ChangesAccepted, ChangesDuplicate, ChangesRejected int
	TooLarge                                                                                                           int // reports answered 413
}

// Stats returns the counters alone (cheap, unlike Snapshot).
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// New returns a control plane. tokenFile may be empty (no authentication). A Retry-After mode
// it does not know is taken as the default, turn (CheckRetryAfter refuses it first).
func New(tokenFile string, f Faults) *Server {
	if f.ThrottleRPS > 0 && f.ThrottleBurst <= 0 {
		f.ThrottleBurst = 1
	}
	if CheckRetryAfter(f.RetryAfter) != nil {
		f.RetryAfter = RetryAfterTurn
	}
	th, _ := NewThrottle(f.ThrottleRPS, f.ThrottleBurst, f.RetryAfter)
	seed := f.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Server{tokenFile: tokenFile, faults: f, now: time.Now, rng: rand.New(rand.NewPCG(seed, 7)),
		agents: map[string]*agent{}, tasks: map[string]*Task{}, accepted: map[string]acceptedChange{},
		throttle: th}
}

// Handler serves the agent side and the operator side.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agents/{agent}/payloads", s.auth(s.poll))
	mux.HandleFunc("POST /v1/agents/{agent}/acks", s.auth(s.acks))
	mux.HandleFunc("POST /v1/agents/{agent}/state-changes", s.auth(s.stateChanges))
	mux.HandleFunc("POST /v1/tasks", s.auth(s.addTask))
	mux.HandleFunc("GET /v1/tasks", s.auth(s.listTasks))
	mux.HandleFunc("/v1/tasks/", s.auth(s.oneTask))
	mux.HandleFunc("GET /v1/violations", s.auth(s.listViolations))
	mux.HandleFunc("GET /v1/stats", s.auth(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		st := s.stats
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, st)
	}))
	return mux
}

func (s *Server) token() string {
	if s.tokenFile == "" {
		return ""
	}
	b, err := os.ReadFile(s.tokenFile)
	if err != nil {
		return "\x00unreadable" // nobody matches
	}
	return strings.TrimSpace(string(b))
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tok := s.token(); tok != "" && r.Header.Get("Authorization") != "Bearer "+tok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func badRequest(w http.ResponseWriter, format string, a ...any) {
	writeJSON(w, http.StatusBadRequest, protocol.ErrorResponse{Error: fmt.Sprintf(format, a...)})
}

// SetClock replaces the wall clock (throttling, acceptance times): the deterministic
// simulation runs the control plane on its virtual clock.
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}
