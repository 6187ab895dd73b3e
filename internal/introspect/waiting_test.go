package introspect_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/introspect"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/simruntime"
)

// TestAWaitingContainerSaysWhatItWaitsFor: web, created, waits for db to turn HEALTHY while db
// runs UNHEALTHY. /v1/tasks, /v1/tasks/{arn} and the status page say so, with how long since
// the task arrived (a journaled time, three minutes ago), measured when asked.
func TestAWaitingContainerSaysWhatItWaitsFor(t *testing.T) {
	j, dir := journalWith(t)
	ctx := context.Background()
	rt, _ := simruntime.Open(dir, "agent-1", nil)
	defer rt.Close()
	timeout := 3600
	db := event.ContainerSpec{Name: "db", Image: "db", Essential: true, Command: []string{"run"},
		HealthCheck: &event.HealthCheck{Command: []string{"CMD", "/testbox", "probe"}}, StartTimeoutS: &timeout}
	web := event.ContainerSpec{Name: "web", Image: "web", Essential: true, DependsOn: []event.Dependency{{Container: "db", Condition: event.DependHealthy}}}
	// What the runtime holds matches the journal, so recovery's reconcile changes nothing.
	dbID, err := rt.Create(ctx, runtime.CreateSpec{Task: "svc", Container: db})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, dbID); err != nil {
		t.Fatal(err)
	}
	webID, err := rt.Create(ctx, runtime.CreateSpec{Task: "svc", Container: web})
	if err != nil {
		t.Fatal(err)
	}
	arrived := time.Now().Add(-3 * time.Minute)
	recs := []event.Record{{Task: "svc", Event: &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{db, web}}}}
	for _, c := range []struct {
		name, id string
		to       []event.Status
	}{{"db", dbID, []event.Status{event.StatusPulled, event.StatusCreated, event.StatusRunning}}, {"web", webID, []event.Status{event.StatusPulled, event.StatusCreated}}} {
		from := event.StatusNone
		for _, to := range c.to {
			recs = append(recs, event.Record{Task: "svc", Container: c.name, Event: &event.ContainerTransitioned{From: from, To: to, RuntimeID: c.id}})
			from = to
		}
	}
	recs = append(recs, event.Record{Task: "svc", Container: "db", Event: &event.HealthChanged{Health: event.HealthUnhealthy}})
	for i := range recs {
		recs[i].Time = arrived
	}
	if _, err := j.Append(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	// Runtime calls are held, never made: nothing moves but the clock.
	e := engine.New(engine.Config{AgentID: "agent-1", CleanupWait: time.Hour}, j, rt, nil, nil, holdExec{}, zerolog.Nop())
	h := introspect.Handler(e, introspect.Info{Version: "test", DataDir: dir, Runtime: "sim"}, fsm.Config{CleanupWait: time.Hour})
	if err := e.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	want := regexp.MustCompile(`^waiting for db HEALTHY, 3m[0-9]+s \(db is RUNNING, UNHEALTHY, start_timeout_s 3600\)$`)
	for _, path := range []string{"/v1/tasks", "/v1/tasks/svc"} {
		code, m := get(t, h, path)
		if code != 200 {
			t.Fatalf("%s: HTTP %d %v", path, code, m)
		}
		task := m
		if tasks, ok := m["tasks"].([]any); ok && len(tasks) == 1 {
			task = tasks[0].(map[string]any)
		}
		cs, _ := task["containers"].([]any)
		if len(cs) != 2 {
			t.Fatalf("%s: containers %v", path, task["containers"])
		}
		if w, _ := cs[1].(map[string]any)["waiting_for"].(string); !want.MatchString(w) {
			t.Errorf("%s: web's waiting_for %q; want it to match %s", path, w, want)
		}
		if w, present := cs[0].(map[string]any)["waiting_for"]; present {
			t.Errorf("%s: db waits for nothing, yet waiting_for is %q", path, w)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if page := w.Body.String(); !strings.Contains(page, "web CREATED (waiting for db HEALTHY, 3m") {
		t.Errorf("the status page does not show web's wait:\n%s", page)
	}
}
