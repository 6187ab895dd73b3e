package simulation

// The control plane's side: the reference control plane in process, reached through its HTTP
// handler, its answers failed, throttled or lost as the seed says.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/protocol"
)

// report is the control plane's answer to the agent's report (the agent's side is a
// testrig.ControlPlane; its polls are the run's own, poll), in process: the requests go
// through the reference control plane's HTTP handler, the faults (5xx, throttling, answers
// lost after the control plane acted on them) are drawn from the seed.
func (s *sim) report(changes []protocol.StateChange) protocol.ReportResult {
	if s.faults && s.rng.Float64() < s.failRate {
		return protocol.ReportResult{Outcome: protocol.ServerError, HTTPStatus: 503}
	}
	if s.faults && s.throttled {
		return protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: time.Duration(1+s.rng.IntN(3)) * time.Second}
	}
	body, _ := json.Marshal(protocol.StateChangesRequest{Changes: changes})
	w := httptest.NewRecorder()
	s.cpH.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/agents/"+agentID+"/state-changes", bytes.NewReader(body)))
	r := protocol.ClassifyReport(w.Code, w.Header().Get("Retry-After"), w.Body.Bytes(), s.clock.Now())
	if s.faults && s.rng.Float64() < s.loseRate {
		// The control plane acted, the answer never arrived: the changes go again, same ids.
		s.log("answer lost after the control plane settled %d changes", len(r.Accepted))
		return protocol.ReportResult{Outcome: protocol.Network, Err: fmt.Errorf("connection reset")}
	}
	return r
}

// poll delivers what the control plane's poll answers, as the poller would: journal, then ack.
func (s *sim) poll() {
	w := httptest.NewRecorder()
	s.cpH.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/agents/"+agentID+"/payloads", nil))
	var pr protocol.PollResponse
	if err := json.Unmarshal(w.Body.Bytes(), &pr); err != nil {
		s.fail("poll answer: %v", err)
		return
	}
	var acks []string
	for _, p := range pr.Payloads {
		done := make(chan error, 1)
		s.e.Step(context.Background(), engine.PayloadInput{Payload: p, Done: done})
		if err := <-done; err != nil {
			if !s.diskFull {
				s.fail("payload %s: %v", p.MessageID, err)
			}
			s.log("payload %s not journaled (disk full), not acknowledged", p.MessageID)
			break
		}
		acks = append(acks, p.MessageID)
	}
	if len(acks) > 0 {
		s.log("poll: %d payloads journaled and acknowledged", len(acks))
		body, _ := json.Marshal(protocol.AcksRequest{MessageIDs: acks})
		s.cpH.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/agents/"+agentID+"/acks", bytes.NewReader(body)))
	}
}
