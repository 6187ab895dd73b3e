package controlplane

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

// Delivery is the agent side of task assignment (PROTOCOL.md §1, §2): each agent's queue of
// payloads, the long poll that answers with every unacknowledged one (at most 50), and the
// acks that retire them. A payload is never lost: it is answered until acknowledged, and with
// ResendAcked after a broken poll even then, while a task it carries is not known STOPPED.

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

// BreakPoll marks the agent's poll connection broken, as a reconnect does: with ResendAcked,
// its next poll re-sends acknowledged payloads of tasks not known STOPPED.
func (s *Server) BreakPoll(agentID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agentLocked(agentID).broken = true
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
