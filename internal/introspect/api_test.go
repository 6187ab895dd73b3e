package introspect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/introspect"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/simruntime"
)

func get(t *testing.T, h http.Handler, path string) (int, map[string]any) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	return w.Code, m
}

// journalWith opens a journal in a fresh data directory holding recs.
func journalWith(t *testing.T, recs ...event.Record) (*journal.Journal, string) {
	t.Helper()
	dir := t.TempDir()
	j, err := journal.Open(filepath.Join(dir, journal.FileName), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	if _, err := j.Append(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
	return j, dir
}

// running recovers e and runs its loop until the test ends.
func running(t *testing.T, e *engine.Engine) {
	t.Helper()
	if err := e.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestNothingAnswersFromAHalfRecoveredState(t *testing.T) {
	now := time.Now()
	spec := []event.ContainerSpec{{Name: "app", Image: "web", Essential: true}}
	j, dir := journalWith(t,
		event.Record{Time: now, Task: "task/live", Event: &event.TaskAdded{Desired: event.StatusRunning, Containers: spec}},
		event.Record{Time: now, Task: "task/gone", Event: &event.TaskRejected{Reason: "containers: none"}})
	rt, _ := simruntime.Open(dir, "agent-1", nil)
	e := engine.New(engine.Config{AgentID: "agent-1", CleanupWait: time.Hour}, j, rt, nil, nil, nil, zerolog.Nop())
	e.RegisterStateCollector()
	h := introspect.Handler(e, introspect.Info{Version: "test", DataDir: dir, Runtime: "sim"}, fsm.Config{CleanupWait: time.Hour})
	for _, p := range []string{"/healthz", "/v1/tasks", "/v1/tasks/task/live", "/v1/metadata"} {
		if code, _ := get(t, h, p); code != 503 {
			t.Fatalf("%s before recovery: HTTP %d; want 503", p, code)
		}
	}
	running(t, e)
	if code, m := get(t, h, "/healthz"); code != 200 || m["healthy"] != true {
		t.Fatalf("/healthz after recovery: %d %v", code, m)
	}
	code, m := get(t, h, "/v1/tasks")
	if code != 200 || len(m["tasks"].([]any)) != 2 {
		t.Fatalf("/v1/tasks: %d %v", code, m)
	}
	code, m = get(t, h, "/v1/tasks/task/gone")
	if code != 200 || m["known_status"] != "STOPPED" || m["reason"] != "containers: none" || m["sent_status"] != "NONE" {
		t.Fatalf("/v1/tasks/task/gone: %d %v", code, m)
	}
	if code, _ := get(t, h, "/v1/tasks/task/nope"); code != 404 {
		t.Fatalf("unknown task: HTTP %d; want 404", code)
	}
	if code, m := get(t, h, "/v1/metadata"); code != 200 || m["agent_id"] != "agent-1" || m["journal_sequence"].(float64) < 3 {
		t.Fatalf("/v1/metadata: %d %v", code, m)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"agentd_tasks{status=\"STOPPED\"} 1", "agentd_healthy 1", "agentd_outbox_changes", "agentd_journal_append_seconds_bucket"} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/journal/export", nil))
	if w.Code != 200 || w.Body.Len() < 4096 {
		t.Fatalf("export: HTTP %d, %d bytes", w.Code, w.Body.Len())
	}
}

// TestARememberedRefusalLeavesTheAgentHealthy: a refusal the journal remembers from before
// the restart (a record_refused) keeps /healthz at 200 — a liveness probe must not restart the
// agent in a loop until the retention ends — and is named all the same: in /healthz's
// degraded, and on the status page as a warning.
func TestARememberedRefusalLeavesTheAgentHealthy(t *testing.T) {
	now := time.Now()
	j, dir := journalWith(t,
		event.Record{Time: now, Event: &event.PayloadReceived{MessageID: "m-1"}},
		event.Record{Time: now, Task: "task/lost", Event: &event.RecordRefused{MessageID: "m-1", Record: "task_added", Reason: "task without containers"}})
	rt, _ := simruntime.Open(dir, "agent-1", nil)
	e := engine.New(engine.Config{AgentID: "agent-1", CleanupWait: time.Hour}, j, rt, nil, nil, nil, zerolog.Nop())
	h := introspect.Handler(e, introspect.Info{Version: "test", DataDir: dir, Runtime: "sim"}, fsm.Config{CleanupWait: time.Hour})
	running(t, e)
	code, m := get(t, h, "/healthz")
	if code != 200 || m["healthy"] != true {
		t.Fatalf("/healthz with a remembered refusal: %d %v; want 200", code, m)
	}
	if d := fmt.Sprint(m["degraded"]); !strings.Contains(d, "core_refusals: ") || !strings.Contains(d, "task/lost") || !strings.Contains(d, "m-1") {
		t.Fatalf("/healthz degraded = %q: want the core_refusals slot naming task/lost and m-1", d)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if page := w.Body.String(); w.Code != 200 || !strings.Contains(page, `<td>core_refusals</td><td class="warn">degraded: task task/lost`) {
		t.Fatalf("status page %d: no warning naming task/lost:\n%s", w.Code, page)
	}
}
