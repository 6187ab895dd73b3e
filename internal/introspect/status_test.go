package introspect_test

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/introspect"
	"github.com/agentd/agentd/internal/simruntime"
	"github.com/agentd/agentd/internal/testrig"
)

// TestStatusPage: the page answers 503 with "recovering" before recovery and never shows a
// half-recovered state; after it, the counts of the projection, escaped task names, a policy
// that forbids anything from elsewhere, the refresh fragment and the timeline drawing.
func TestStatusPage(t *testing.T) {
	now := time.Now()
	spec := []event.ContainerSpec{{Name: "app", Image: "web", Essential: true}}
	hostile := `task/<img/src=x/onerror=alert(1)>`
	j, dir := journalWith(t,
		event.Record{Time: now, Task: "task/live", Event: &event.TaskAdded{Desired: event.StatusRunning, Containers: spec}},
		event.Record{Time: now, Task: hostile, Event: &event.TaskRejected{Reason: "<script>alert(2)</script>"}})
	rt, _ := simruntime.Open(dir, "agent-1", nil)
	// Runtime calls are held, never made: task/live stays NONE however fast the loop runs.
	e := engine.New(engine.Config{AgentID: "agent-1", CleanupWait: time.Hour}, j, rt, nil, nil, &testrig.Executor[engine.Input]{} /* never run: nothing the engine decides happens */, zerolog.Nop())
	e.RegisterStateCollector()
	e.RegisterDegradedSource(engine.HealthOTLP)
	e.SetDegraded(engine.HealthOTLP, "the OTLP endpoint answered 503")
	h := introspect.Handler(e, introspect.Info{Version: "test", DataDir: dir, Runtime: "sim"}, fsm.Config{CleanupWait: time.Hour})
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w
	}
	if w := get("/"); w.Code != 503 || !strings.Contains(w.Body.String(), "recovering") || strings.Contains(w.Body.String(), "task/live") {
		t.Fatalf("before recovery: HTTP %d\n%s", w.Code, w.Body.String())
	}
	running(t, e)

	w := get("/")
	page := w.Body.String()
	if w.Code != 200 {
		t.Fatalf("after recovery: HTTP %d\n%s", w.Code, page)
	}
	csp := w.Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy %q: want nothing from elsewhere and no inline script", csp)
	}
	for _, want := range []string{`id="count-STOPPED" data-value="1"`, `id="count-NONE" data-value="1"`, `id="count-CLEANED" data-value="0"`,
		`data-source="runtime"`, `data-source="credentials"`, `id="blocked-count" data-value="1"`, `<script src="/status.js"`, `href="/status.css"`,
		// Shipping's trouble degrades the agent without making it unhealthy: a warning, not red.
		`<td>otlp</td><td class="warn">degraded: the OTLP endpoint answered 503</td>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if !strings.Contains(page, `href="/v1/tasks/task/%3Cimg/src=x/onerror=alert%281%29%3E"`) {
		t.Errorf("the hostile task's link is not escaped segment by segment")
	}
	for _, bad := range []string{"<img/src=x", "<script>alert(2)", "http://", "https://"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page contains %q (unescaped input or an outside asset)", bad)
		}
	}
	if w := get("/?part=main"); w.Code != 200 || strings.Contains(w.Body.String(), "<html") || !strings.Contains(w.Body.String(), "count-STOPPED") {
		t.Errorf("the refresh fragment: HTTP %d\n%s", w.Code, w.Body.String())
	}
	for path, ctype := range map[string]string{"/status.js": "text/javascript", "/status.css": "text/css"} {
		if w := get(path); w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), ctype) || w.Body.Len() < 100 {
			t.Errorf("%s: HTTP %d %q", path, w.Code, w.Header().Get("Content-Type"))
		}
	}
	w = get("/status/timeline.svg?task=" + url.QueryEscape(hostile))
	if w.Code != 200 || w.Header().Get("Content-Type") != "image/svg+xml" || !strings.Contains(w.Body.String(), "<svg") || strings.Contains(w.Body.String(), "<img/src") {
		t.Errorf("timeline of the hostile task: HTTP %d %q\n%s", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
	if w := get("/status/timeline.svg?task=task/nope"); w.Code != 404 || !strings.Contains(w.Body.String(), "task/nope") {
		t.Errorf("timeline of an unknown task: HTTP %d %s", w.Code, w.Body.String())
	}
	if w := get("/status/timeline.svg"); w.Code != 400 || !strings.Contains(w.Body.String(), "task") {
		t.Errorf("timeline without a task: HTTP %d %s", w.Code, w.Body.String())
	}
	if w := get("/nope"); w.Code != 404 {
		t.Errorf("/nope: HTTP %d; the page must answer / only", w.Code)
	}
}

// TestTimelineReadsABoundedSpan: a drawing reads the journal from the task's first record on,
// never the records before it, and at most the bound: past it the answer is 422 naming the
// bound instead of a scan of the whole journal.
func TestTimelineReadsABoundedSpan(t *testing.T) {
	spec := []event.ContainerSpec{{Name: "app", Image: "web", Essential: true}}
	add := func(arn string) event.Record {
		return event.Record{Time: time.Now(), Task: arn, Event: &event.TaskAdded{Desired: event.StatusRunning, Containers: spec}}
	}
	var recs []event.Record
	for i := range 50 { // before task/drawn: never read
		recs = append(recs, add(fmt.Sprintf("task/before-%d", i)))
	}
	recs = append(recs, add("task/drawn"))
	for i := range 20 { // after it: read, up to the bound
		recs = append(recs, add(fmt.Sprintf("task/after-%d", i)))
	}
	j, dir := journalWith(t, recs...)
	rt, _ := simruntime.Open(dir, "agent-1", nil)
	e := engine.New(engine.Config{AgentID: "agent-1", CleanupWait: time.Hour}, j, rt, nil, nil, &testrig.Executor[engine.Input]{} /* never run: nothing the engine decides happens */, zerolog.Nop())
	running(t, e)
	draw := func(bound int) *httptest.ResponseRecorder {
		h := introspect.Handler(e, introspect.Info{Version: "test", DataDir: dir, Runtime: "sim", TimelineMaxRecords: bound}, fsm.Config{CleanupWait: time.Hour})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/status/timeline.svg?task=task/drawn", nil))
		return w
	}
	// 21 records from task/drawn's first on, 71 in the journal: a bound of 30 draws it.
	if w := draw(30); w.Code != 200 || !strings.Contains(w.Body.String(), "task/drawn") {
		t.Fatalf("bound 30: HTTP %d %.200s; want the drawing (21 records from the task's first)", w.Code, w.Body.String())
	}
	if w := draw(10); w.Code != 422 || !strings.Contains(w.Body.String(), "more than 10 records") {
		t.Fatalf("bound 10: HTTP %d %s; want 422 naming the bound", w.Code, w.Body.String())
	}
}
