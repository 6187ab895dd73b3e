package controlplane

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

// PROTOCOL.md 1.1 on reports: a body over 1 MiB is answered 413 and settles nothing; a reason
// over 1 KiB is a malformed request (400, nothing settled) and a violation by the agent.
func TestReportLimits(t *testing.T) {
	s := New("", Faults{})
	h := s.Handler()
	_ = s.AddTask("a1", protocol.Task{ARN: "task/x", DesiredStatus: "RUNNING", Containers: []protocol.Container{{Name: "app", Image: "web"}}}, nil)
	post := func(changes ...protocol.StateChange) int {
		b, _ := json.Marshal(protocol.StateChangesRequest{Changes: changes})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/agents/a1/state-changes", bytes.NewReader(b)))
		return w.Code
	}
	var big []protocol.StateChange
	for i := 0; i < 100; i++ { // 100 changes with 11 KB task ARNs: over 1 MiB
		big = append(big, protocol.StateChange{ID: "c-big-" + string(rune('a'+i%26)) + strings.Repeat("x", i), TaskARN: "task/x" + strings.Repeat("y", 11<<10), Status: "RUNNING", At: time.Now()})
	}
	if code := post(big...); code != 413 {
		t.Fatalf("a report over 1 MiB: HTTP %d; want 413", code)
	}
	long := protocol.StateChange{ID: "c-long", TaskARN: "task/x", Container: "app", Status: "RUNNING", Reason: strings.Repeat("r", 1025), At: time.Now()}
	if code := post(long); code != 400 {
		t.Fatalf("a reason of 1025 bytes: HTTP %d; want 400", code)
	}
	if tasks, _ := s.Snapshot(); tasks["task/x"].Containers["app"] != nil && tasks["task/x"].Containers["app"].Status != "" {
		t.Fatal("a refused report settled a change")
	}
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0].Rule, "reason of 1025 bytes") {
		t.Fatalf("violations %+v; want the long reason named", v)
	}
	if s.Stats().TooLarge != 1 {
		t.Fatalf("stats %+v", s.Stats())
	}
}
