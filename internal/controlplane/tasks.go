package controlplane

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
)

// Tasks are the operator side: queue a task for an agent, stop one or many (each stop a new
// payload), and read back what the control plane has accepted for each — its status, its
// containers' and the history of accepted changes with when each was accepted.

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
	return s.addLocked(agentID, t, raw)
}

// AddTasks is AddTask for many agents' tasks (by agent) at one instant, under one lock, as
// StopTasks stops them: called one by one, 2,000 tasks for 200 agent processes on two cores
// took a second, each agent's burst beginning up to that much later than the first's.
func (s *Server) AddTasks(tasks map[string][]protocol.Task) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for agentID, ts := range tasks {
		for _, t := range ts {
			raw, _ := json.Marshal(t)
			if err := s.addLocked(agentID, t, raw); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Server) addLocked(agentID string, t protocol.Task, raw json.RawMessage) error {
	if _, dup := s.tasks[t.ARN]; dup {
		return fmt.Errorf("task.arn: %s exists", t.ARN)
	}
	s.tasks[t.ARN] = &Task{ARN: t.ARN, Agent: agentID, Desired: t.DesiredStatus, Containers: map[string]*Container{}, spec: t}
	s.queueLocked(agentID, []json.RawMessage{raw}, []string{t.ARN})
	return nil
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

// TaskStatus is the last status accepted for a task ("" when none, or no such task).
func (s *Server) TaskStatus(arn string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tasks[arn]; t != nil {
		return t.Status
	}
	return ""
}
