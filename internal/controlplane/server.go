// Package controlplane is the reference control plane: PROTOCOL.md served for any number of
// agents, with an operator side to queue and stop tasks and faults that can be switched on
// (throttling, 5xx, dropped connections, latency, re-sent acknowledged payloads). It is a
// development and test tool, kept in memory — but correct: it is what the project's own
// end-to-end and crash tests run against, and it checks the protocol's rules from its side
// (GET /v1/violations).
package controlplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
)

// Faults are off by default.
type Faults struct {
	ThrottleRPS   float64       // state-change requests per second (token bucket); 0: no throttling
	ThrottleBurst int           // bucket size (default 1 when throttling)
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
	tokens     float64
	refilled   time.Time
	stats      Stats
}

type agent struct {
	id       string
	payloads []*payload
	byID     map[string]*payload
	wake     chan struct{} // closed when a payload is queued
	broken   bool          // a poll broke since the last answer
}

type payload struct {
	id    string
	tasks []json.RawMessage
	arns  []string
	acked bool
}

type acceptedChange struct {
	task, container, status, health string
}

// Task is the control plane's view of a task: what it assigned and what it has accepted.
type Task struct {
	ARN        string                `json:"arn"`
	Agent      string                `json:"agent"`
	Desired    string                `json:"desired_status"`
	Status     string                `json:"status"`
	StatusAt   time.Time             `json:"status_at,omitzero"`
	Reason     string                `json:"reason,omitempty"`
	Health     string                `json:"health,omitempty"` // the last health change reported (PROTOCOL.md §4)
	Containers map[string]*Container `json:"containers"`
	History    []Accepted            `json:"history"`
	spec       protocol.Task
}

// Container is the control plane's view of a container.
type Container struct {
	Status          string                 `json:"status"`
	ExitCode        *int                   `json:"exit_code,omitempty"`
	At              time.Time              `json:"at,omitzero"`
	Health          string                 `json:"health,omitempty"`           // the last health change reported
	NetworkBindings []event.NetworkBinding `json:"network_bindings,omitempty"` // with its RUNNING
}

// Accepted is one accepted change, when it happened at the agent and when it was accepted.
type Accepted struct {
	ID         string    `json:"id"`
	Container  string    `json:"container,omitempty"`
	Status     string    `json:"status"`
	At         time.Time `json:"at"`
	AcceptedAt time.Time `json:"accepted_at"`
}

// Violation is a protocol rule the agent broke, as seen from here.
type Violation struct {
	Agent  string    `json:"agent"`
	Task   string    `json:"task_arn"`
	Change string    `json:"change_id"`
	Rule   string    `json:"rule"`
	At     time.Time `json:"at"`
}

// Stats counts what the control plane saw.
type Stats struct {
	Polls, PayloadsSent, Acks, Reports, Throttled, Failed, Dropped, ChangesAccepted, ChangesDuplicate, ChangesRejected int
	TooLarge                                                                                                           int // reports answered 413
}

// New returns a control plane. tokenFile may be empty (no authentication).
func New(tokenFile string, f Faults) *Server {
	if f.ThrottleRPS > 0 && f.ThrottleBurst <= 0 {
		f.ThrottleBurst = 1
	}
	seed := f.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Server{tokenFile: tokenFile, faults: f, now: time.Now, rng: rand.New(rand.NewPCG(seed, 7)),
		agents: map[string]*agent{}, tasks: map[string]*Task{}, accepted: map[string]acceptedChange{},
		tokens: float64(f.ThrottleBurst)}
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
	mux.HandleFunc("GET /v1/runtime", s.auth(s.serveRuntime)) // runtime.go
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

func (s *Server) agentLocked(id string) *agent {
	a, ok := s.agents[id]
	if !ok {
		a = &agent{id: id, wake: make(chan struct{}), byID: map[string]*payload{}}
		s.agents[id] = a
	}
	return a
}

func (s *Server) poll(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("agent")
	wait := 0
	if v := r.URL.Query().Get("wait"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			badRequest(w, "wait: %q is not a number of seconds", v)
			return
		}
		wait = min(n, protocol.MaxWaitSeconds)
	}
	s.mu.Lock()
	a := s.agentLocked(id)
	s.stats.Polls++
	s.mu.Unlock()
	if s.fault(w, r, a) {
		return
	}
	deadline := time.After(time.Duration(wait) * time.Second)
	for {
		s.mu.Lock()
		out := s.pendingLocked(a)
		wake := a.wake
		s.mu.Unlock()
		if len(out) > 0 || wait == 0 {
			writeJSON(w, http.StatusOK, protocol.PollResponse{Payloads: out})
			return
		}
		select {
		case <-wake:
		case <-deadline:
			writeJSON(w, http.StatusOK, protocol.PollResponse{Payloads: []protocol.Payload{}})
			return
		case <-r.Context().Done():
			s.mu.Lock()
			a.broken = true // the agent went away mid-poll: a reconnect
			s.mu.Unlock()
			return
		}
	}
}

// pendingLocked is what a poll answers: every unacknowledged payload, and after a broken poll
// with ResendAcked, acknowledged ones too whose tasks it has not been told are STOPPED.
func (s *Server) pendingLocked(a *agent) []protocol.Payload {
	resend := a.broken && s.faults.ResendAcked
	a.broken = false
	var out []protocol.Payload
	for _, p := range a.payloads {
		if p.acked && !resend {
			continue
		}
		if p.acked {
			live := false
			for _, arn := range p.arns {
				if t := s.tasks[arn]; t != nil && t.Status != "STOPPED" {
					live = true
				}
			}
			if !live {
				continue
			}
		}
		out = append(out, protocol.Payload{MessageID: p.id, Tasks: p.tasks})
		if len(out) >= 50 {
			break
		}
	}
	s.stats.PayloadsSent += len(out)
	return out
}

func (s *Server) acks(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("agent")
	var req protocol.AcksRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		badRequest(w, "body: %v", err)
		return
	}
	s.mu.Lock()
	a := s.agentLocked(id)
	s.mu.Unlock()
	if s.fault(w, r, a) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Acks++
	for _, m := range req.MessageIDs {
		if p := a.byID[m]; p != nil {
			p.acked = true
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

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

func (s *Server) stateChanges(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("agent")
	s.mu.Lock()
	a := s.agentLocked(id)
	s.mu.Unlock()
	if s.fault(w, r, a) {
		return
	}
	var req protocol.StateChangesRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, protocol.MaxRequestBody))
	if err := dec.Decode(&req); err != nil {
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			// PROTOCOL.md §3: nothing settled; the agent sends fewer changes a request.
			s.mu.Lock()
			s.stats.TooLarge++
			s.mu.Unlock()
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		badRequest(w, "body: %v", err)
		return
	}
	if n := len(req.Changes); n < 1 || n > protocol.MaxChangesPerRequest {
		badRequest(w, "changes: %d, want 1 to %d", n, protocol.MaxChangesPerRequest)
		return
	}
	for i, c := range req.Changes {
		healthChange := c.Status == "" && (c.Health == "HEALTHY" || c.Health == "UNHEALTHY")
		if c.ID == "" || c.TaskARN == "" || (!event.Status(c.Status).Reportable() && !healthChange) || (c.Status != "" && c.Health != "") || c.At.IsZero() {
			badRequest(w, "changes[%d]: needs id, task_arn, a status of PULLED, CREATED, RUNNING or STOPPED (or, instead, a health of HEALTHY or UNHEALTHY), and at", i)
			return
		}
		if len(c.Reason) > protocol.MaxReasonBytes {
			s.mu.Lock()
			s.violate(id, c, fmt.Sprintf("reason of %d bytes, at most %d", len(c.Reason), protocol.MaxReasonBytes))
			s.mu.Unlock()
			badRequest(w, "changes[%d].reason: %d bytes, at most %d", i, len(c.Reason), protocol.MaxReasonBytes)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if ok, after := s.takeLocked(now); !ok {
		s.stats.Throttled++
		w.Header().Set("Retry-After", strconv.FormatFloat(after.Seconds(), 'f', 3, 64))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	s.stats.Reports++
	resp := protocol.StateChangesResponse{Accepted: []string{}, Rejected: []protocol.Rejection{}}
	for _, c := range req.Changes {
		if prev, ok := s.accepted[c.ID]; ok {
			if prev != (acceptedChange{c.TaskARN, c.Container, c.Status, c.Health}) {
				s.violate(id, c, "change id reused for a different change")
			}
			s.stats.ChangesDuplicate++
			resp.Accepted = append(resp.Accepted, c.ID)
			continue
		}
		t := s.tasks[c.TaskARN]
		if t == nil || t.Agent != id {
			s.stats.ChangesRejected++
			resp.Rejected = append(resp.Rejected, protocol.Rejection{ID: c.ID, Error: "unknown_task"})
			continue
		}
		s.acceptLocked(id, t, c, now)
		resp.Accepted = append(resp.Accepted, c.ID)
	}
	writeJSON(w, http.StatusOK, resp)
}

// acceptLocked records a change and checks the ordering rules: per subject, statuses only
// move forward and none is reported twice under different ids; a task's STOPPED only after
// each of its containers' STOPPED.
func (s *Server) acceptLocked(agentID string, t *Task, c protocol.StateChange, now time.Time) {
	s.stats.ChangesAccepted++
	s.accepted[c.ID] = acceptedChange{c.TaskARN, c.Container, c.Status, c.Health}
	t.History = append(t.History, Accepted{ID: c.ID, Container: c.Container, Status: c.Status, At: c.At, AcceptedAt: now})
	if c.Health != "" {
		// A health change moves no status: it is only recorded (a container's, or the task's).
		if c.Container == "" {
			t.Health = c.Health
		} else if ct := t.Containers[c.Container]; ct != nil {
			ct.Health = c.Health
		}
		return
	}
	if c.Container != "" {
		ct := t.Containers[c.Container]
		if ct == nil {
			ct = &Container{}
			t.Containers[c.Container] = ct
		}
		if c.Status == "RUNNING" {
			ct.NetworkBindings = c.NetworkBindings
		}
		if !s.forward(agentID, c, "container", ct.Status) {
			return
		}
		ct.Status, ct.ExitCode, ct.At = c.Status, c.ExitCode, c.At
		return
	}
	if !s.forward(agentID, c, "task", t.Status) {
		return
	}
	// An invalid task is never run: its STOPPED comes alone. A valid one's comes last.
	if c.Status == "STOPPED" && protocol.Validate(&t.spec) == nil {
		for _, spec := range t.spec.Containers {
			if ct := t.Containers[spec.Name]; ct == nil || ct.Status != "STOPPED" {
				s.violate(agentID, c, "task STOPPED before container "+spec.Name+"'s STOPPED")
			}
		}
	}
	t.Status, t.StatusAt, t.Reason = c.Status, c.At, c.Reason
}

// forward checks that a subject's status moves forward along the lifecycle (event.Status's
// order): the same status again is reported twice (a violation, but recorded), a lower one
// moves back (a violation, not recorded).
func (s *Server) forward(agentID string, c protocol.StateChange, subject, from string) bool {
	to, was := event.Status(c.Status).Rank(), event.Status(from).Rank()
	switch {
	case to == was:
		s.violate(agentID, c, subject+" status "+c.Status+" reported twice")
	case to < was:
		s.violate(agentID, c, subject+" status moved back from "+from+" to "+c.Status)
		return false
	}
	return true
}

func (s *Server) violate(agentID string, c protocol.StateChange, rule string) {
	s.violations = append(s.violations, Violation{Agent: agentID, Task: c.TaskARN, Change: c.ID, Rule: rule, At: s.now()})
}

// AddTaskRequest is the body of POST /v1/tasks.
type AddTaskRequest struct {
	Agent string          `json:"agent"`
	Task  json.RawMessage `json:"task"`
}

func (s *Server) addTask(w http.ResponseWriter, r *http.Request) {
	var req AddTaskRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20)).Decode(&req); err != nil {
		badRequest(w, "body: %v", err)
		return
	}
	if req.Agent == "" {
		badRequest(w, "agent: missing")
		return
	}
	var t protocol.Task
	if err := json.Unmarshal(req.Task, &t); err != nil {
		badRequest(w, "task: %v", err)
		return
	}
	if t.ARN == "" {
		badRequest(w, "task.arn: missing")
		return
	}
	if t.DesiredStatus == "" {
		t.DesiredStatus = "RUNNING"
	}
	raw := req.Task
	if !strings.Contains(string(raw), `"desired_status"`) {
		raw, _ = json.Marshal(t)
	}
	if err := s.AddTask(req.Agent, t, raw); err != nil {
		writeJSON(w, http.StatusConflict, protocol.ErrorResponse{Error: err.Error()})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	writeJSON(w, http.StatusCreated, s.tasks[t.ARN])
}

// AddTask queues a task for an agent in a payload of its own. raw is sent as given (an
// invalid task too: the agent must record it STOPPED); nil sends t encoded.
func (s *Server) AddTask(agentID string, t protocol.Task, raw json.RawMessage) error {
	if raw == nil {
		raw, _ = json.Marshal(t)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.tasks[t.ARN]; dup {
		return fmt.Errorf("task.arn: %s exists", t.ARN)
	}
	s.tasks[t.ARN] = &Task{ARN: t.ARN, Agent: agentID, Desired: t.DesiredStatus, Containers: map[string]*Container{}, spec: t}
	s.queueLocked(agentID, []json.RawMessage{raw}, []string{t.ARN})
	return nil
}

// SetClock replaces the wall clock (throttling, acceptance times): the deterministic
// simulation runs the control plane on its virtual clock.
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// BreakPoll marks the agent's poll connection broken, as a reconnect does: with ResendAcked,
// its next poll re-sends acknowledged payloads of tasks not known STOPPED.
func (s *Server) BreakPoll(agentID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agentLocked(agentID).broken = true
}

// Adopt records a task as assigned to an agent that already has it, without sending a payload:
// for benchmarks and tests that build the agent's journal directly.
func (s *Server) Adopt(agentID string, t protocol.Task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks[t.ARN] = &Task{ARN: t.ARN, Agent: agentID, Desired: t.DesiredStatus, Containers: map[string]*Container{}, spec: t}
}

// StopTask sets a task's desired status to STOPPED and sends it in a new payload.
func (s *Server) StopTask(arn string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(arn)
}

func (s *Server) stopLocked(arn string) error {
	t := s.tasks[arn]
	if t == nil {
		return fmt.Errorf("no task %s", arn)
	}
	if t.Desired != "STOPPED" {
		t.Desired = "STOPPED"
		spec := t.spec
		spec.DesiredStatus = "STOPPED"
		raw, _ := json.Marshal(spec)
		s.queueLocked(t.Agent, []json.RawMessage{raw}, []string{arn})
	}
	return nil
}

func (s *Server) queueLocked(agentID string, tasks []json.RawMessage, arns []string) string {
	a := s.agentLocked(agentID)
	s.nextMsg++
	id := fmt.Sprintf("m-%06d", s.nextMsg)
	p := &payload{id: id, tasks: tasks, arns: arns}
	a.payloads = append(a.payloads, p)
	a.byID[id] = p
	close(a.wake)
	a.wake = make(chan struct{})
	return id
}

func (s *Server) oneTask(w http.ResponseWriter, r *http.Request) {
	arn := strings.TrimPrefix(r.URL.Path, "/v1/tasks/")
	stop := false
	if r.Method == http.MethodPost {
		var ok bool
		if arn, ok = strings.CutSuffix(arn, "/stop"); !ok {
			http.Error(w, "POST /v1/tasks/{arn}/stop", http.StatusNotFound)
			return
		}
		stop = true
	} else if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[arn]
	if t == nil {
		writeJSON(w, http.StatusNotFound, protocol.ErrorResponse{Error: "no task " + arn})
		return
	}
	if stop {
		_ = s.stopLocked(arn)
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Task, 0, len(s.tasks))
	for _, t := range s.tasks {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *Task) int { return strings.Compare(a.ARN, b.ARN) })
	writeJSON(w, http.StatusOK, map[string]any{"tasks": out})
}

func (s *Server) listViolations(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"violations": append([]Violation{}, s.violations...)})
}

// Violations returns the rules broken so far (for in-process tests).
func (s *Server) Violations() []Violation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Violation(nil), s.violations...)
}

// Snapshot returns a copy of the control plane's view of every task and its stats.
func (s *Server) Snapshot() (map[string]Task, Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Task, len(s.tasks))
	for arn, t := range s.tasks {
		cp := *t
		cp.Containers = map[string]*Container{}
		for k, v := range t.Containers {
			c := *v
			cp.Containers[k] = &c
		}
		cp.History = append([]Accepted(nil), t.History...)
		out[arn] = cp
	}
	return out, s.stats
}

// Stats returns the counters alone (cheap, unlike Snapshot).
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Unacknowledged counts the payloads queued for an agent that it has not acknowledged: what a
// test holds to "every payload is acknowledged, whatever it holds".
func (s *Server) Unacknowledged(agentID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	if a := s.agents[agentID]; a != nil {
		for _, p := range a.payloads {
			if !p.acked {
				n++
			}
		}
	}
	return n
}

// StopTasks stops every task named at one instant (one lock): an operator's fleet-wide stop,
// which every agent's next poll sees whole.
func (s *Server) StopTasks(arns []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, arn := range arns {
		if err := s.stopLocked(arn); err != nil {
			return err
		}
	}
	return nil
}

// TaskStatus is the last status accepted for a task ("" when none, or no such task).
func (s *Server) TaskStatus(arn string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tasks[arn]; t != nil {
		return t.Status
	}
	return ""
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
