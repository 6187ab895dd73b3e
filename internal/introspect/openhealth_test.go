package introspect

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/simruntime"
)

// TestOpenPagesNameNoTaskInTheirHealth: the health slots of the core name tasks and payloads
// (a remembered refusal here), so a caller without credentials reads of /healthz and the status
// page which source has a problem, never the problem: no task, no message id.
func TestOpenPagesNameNoTaskInTheirHealth(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(filepath.Join(dir, journal.FileName), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	now := time.Now()
	if _, err := j.Append(context.Background(),
		event.Record{Time: now, Event: &event.PayloadReceived{MessageID: "m-secret"}},
		event.Record{Time: now, Task: "task/secret-arn", Event: &event.RecordRefused{MessageID: "m-secret", Record: "task_added", Reason: "task without containers"}}); err != nil {
		t.Fatal(err)
	}
	rt, _ := simruntime.Open(dir, "agent-1", nil)
	e := engine.New(engine.Config{AgentID: "agent-1", CleanupWait: time.Hour}, j, rt, nil, nil, nil, zerolog.Nop())
	if err := e.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	h := Handler(e, Info{Version: "test", DataDir: dir, Runtime: "sim"}, fsm.Config{CleanupWait: time.Hour})
	for _, path := range []string{"/healthz", "/", "/?part=main"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil).WithContext(context.WithValue(context.Background(), limitedKey{}, true)))
		body := w.Body.String()
		if w.Code != 200 || !strings.Contains(body, "core_refusals") || !strings.Contains(body, "needs credentials") {
			t.Errorf("GET %s without credentials: HTTP %d, want 200 saying core_refusals has a problem whose detail needs credentials:\n%.600s", path, w.Code, body)
		}
		for _, secret := range []string{"task/secret-arn", "m-secret"} {
			if strings.Contains(body, secret) {
				t.Errorf("GET %s without credentials carries %q", path, secret)
			}
		}
	}
}
