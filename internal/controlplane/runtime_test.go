package controlplane

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/internal/protocol"
)

// GET /v1/runtime counts what the control plane holds — the agents it has heard from or
// queued for, and the tasks — beside its goroutines and heap, behind the same token as the
// rest of the operator side.
func TestRuntimeCountsAgentsAndTasks(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := writeFile(tok, "s3cret\n"); err != nil {
		t.Fatal(err)
	}
	s := New(tok, Faults{})
	h := s.Handler()
	for i, agent := range []string{"a1", "a1", "a2"} {
		if err := s.AddTask(agent, protocol.Task{ARN: "task/" + string(rune('x'+i)), DesiredStatus: "RUNNING"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	poll := httptest.NewRequest("GET", "/v1/agents/a3/payloads?wait=0", nil)
	poll.Header.Set("Authorization", "Bearer s3cret")
	h.ServeHTTP(httptest.NewRecorder(), poll)

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/runtime", nil))
	if w.Code != 401 {
		t.Fatalf("without the token: HTTP %d, want 401", w.Code)
	}
	req := httptest.NewRequest("GET", "/v1/runtime?gc=1", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var rt Runtime
	if err := json.Unmarshal(w.Body.Bytes(), &rt); w.Code != 200 || err != nil {
		t.Fatalf("HTTP %d %s: %v", w.Code, w.Body, err)
	}
	if rt.Agents != 3 || rt.Tasks != 3 || rt.Goroutines == 0 || rt.HeapBytes == 0 {
		t.Fatalf("runtime %+v, want 3 agents, 3 tasks, goroutines and heap counted", rt)
	}
}
