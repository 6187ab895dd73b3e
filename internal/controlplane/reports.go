package controlplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
)

// Reports are the agent's state changes (PROTOCOL.md §3): checked for shape and limits
// (400, 413), throttled (throttle.go), then each change settled — accepted once by id (a
// re-sent id is accepted again without effect), or rejected for good. The control plane checks
// the protocol's rules from its side as it accepts, and records what an agent broke as a
// Violation (GET /v1/violations): an id reused for another change, a status reported twice or
// moving back, a task's STOPPED before its containers', a reason over the limit.

type acceptedChange struct {
	task, container, status, health string
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
	if ok, after := s.throttle.Take(now, id); !ok {
		s.stats.Throttled++
		if s.throttle.mode != RetryAfterNone {
			// Rounded up to the millisecond: a client that waits exactly what it is told is never early.
			w.Header().Set("Retry-After", strconv.FormatFloat(math.Ceil(after.Seconds()*1000)/1000, 'f', 3, 64))
		}
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

// Violation is a protocol rule the agent broke, as seen from here.
type Violation struct {
	Agent  string    `json:"agent"`
	Task   string    `json:"task_arn"`
	Change string    `json:"change_id"`
	Rule   string    `json:"rule"`
	At     time.Time `json:"at"`
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
