package controlplane

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

func report(t *testing.T, h http.Handler, changes ...protocol.StateChange) protocol.StateChangesResponse {
	t.Helper()
	b, _ := json.Marshal(protocol.StateChangesRequest{Changes: changes})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/agents/a1/state-changes", bytes.NewReader(b)))
	if w.Code != 200 {
		t.Fatalf("report: HTTP %d %s", w.Code, w.Body)
	}
	var r protocol.StateChangesResponse
	_ = json.Unmarshal(w.Body.Bytes(), &r)
	return r
}

func ch(id, container, status string) protocol.StateChange {
	return protocol.StateChange{ID: id, TaskARN: "task/x", Container: container, Status: status, At: time.Now()}
}

// The control plane's checker can fail: it names each rule an agent breaks.
func TestViolationsAreNamed(t *testing.T) {
	s := New("", Faults{})
	h := s.Handler()
	_ = s.AddTask("a1", protocol.Task{ARN: "task/x", DesiredStatus: "RUNNING", Containers: []protocol.Container{{Name: "app", Image: "web"}}}, nil)
	report(t, h, ch("c-1", "app", "RUNNING"))
	report(t, h, ch("c-1", "app", "RUNNING")) // a retry: de-duplicated, fine
	report(t, h, ch("c-2", "app", "PULLED"))  // moves back
	report(t, h, ch("c-3", "app", "RUNNING")) // the same status under a new id: ran twice?
	report(t, h, ch("c-4", "", "STOPPED"))    // task STOPPED before its container's
	report(t, h, ch("c-1", "app", "STOPPED")) // an id reused for another change
	var rules []string
	for _, v := range s.Violations() {
		rules = append(rules, v.Rule)
	}
	got := strings.Join(rules, "|")
	for _, want := range []string{"moved back from RUNNING to PULLED", "container status RUNNING reported twice", "task STOPPED before container app's STOPPED", "change id reused"} {
		if !strings.Contains(got, want) {
			t.Errorf("violations %q lack %q", got, want)
		}
	}
	if len(rules) != 4 {
		t.Errorf("%d violations; want 4: %v", len(rules), rules)
	}
}

// Only the statuses the protocol reports are accepted: the agent's own (NONE, STOPPED_ACKED,
// CLEANING, CLEANED) and names that are no status are a bad request.
func TestOnlyReportableStatusesAreAccepted(t *testing.T) {
	h := New("", Faults{}).Handler()
	for status, want := range map[string]int{"PULLED": 200, "CREATED": 200, "RUNNING": 200, "STOPPED": 200,
		"NONE": 400, "STOPPED_ACKED": 400, "CLEANING": 400, "CLEANED": 400, "running": 400, "": 400} {
		b, _ := json.Marshal(protocol.StateChangesRequest{Changes: []protocol.StateChange{ch("c-"+status, "app", status)}})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/agents/a1/state-changes", bytes.NewReader(b)))
		if w.Code != want {
			t.Errorf("status %q: HTTP %d %s; want %d", status, w.Code, w.Body, want)
		}
	}
}

func TestLongPollAnswersWhenATaskArrives(t *testing.T) {
	s := New("", Faults{})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	got := make(chan protocol.PollResponse, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/v1/agents/a1/payloads?wait=30")
		if err != nil {
			return
		}
		defer resp.Body.Close()
		var pr protocol.PollResponse
		_ = json.NewDecoder(resp.Body).Decode(&pr)
		got <- pr
	}()
	// Assign only once the poll is in (it waits then, having nothing to answer with).
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Polls == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the poll never arrived")
		}
	}
	_ = s.AddTask("a1", protocol.Task{ARN: "task/x", DesiredStatus: "RUNNING", Containers: []protocol.Container{{Name: "app", Image: "web"}}}, nil)
	select {
	case pr := <-got:
		if len(pr.Payloads) != 1 || len(pr.Payloads[0].Tasks) != 1 {
			t.Fatalf("poll answered %+v", pr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll did not answer when a task arrived")
	}
}

func TestUnauthenticatedRequestsAreRefused(t *testing.T) {
	dir := t.TempDir()
	tok := dir + "/token"
	_ = writeFile(tok, "secret")
	h := New(tok, Faults{}).Handler()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/agents/a1/payloads", nil))
	if w.Code != 401 {
		t.Fatalf("no token: HTTP %d; want 401", w.Code)
	}
	r := httptest.NewRequest("GET", "/v1/agents/a1/payloads", nil)
	r.Header.Set("Authorization", "Bearer secret")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("right token: HTTP %d; want 200", w.Code)
	}
}
