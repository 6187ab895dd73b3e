package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/agentd/agentd/internal/controlplane"
)

// holdingControlPlane is the reference control plane with a switch: while held, every
// state-change report is answered 429 (Retry-After 1 s), so a task that stops then stays
// STOPPED, blocked on its acknowledgement, and the agent is visibly throttled.
type holdingControlPlane struct {
	cp   *controlplane.Server
	h    http.Handler
	hold atomic.Bool
	held atomic.Int64
}

func (c *holdingControlPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.hold.Load() && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/state-changes") {
		c.held.Add(1)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	c.h.ServeHTTP(w, r)
}

// statusScenario is a running agent (the real binary) whose tasks rest in every state a task
// can rest in on the simulated runtime: RUNNING, STOPPED and blocked on its acknowledgement
// (the control plane throttles every report), STOPPED_ACKED waiting out a long cleanup wait,
// a rejected task (STOPPED with a reason, then acknowledged), and CLEANED (a tombstone left
// by an earlier run of the agent with a short cleanup wait).
type statusScenario struct {
	cp    *holdingControlPlane
	cpURL string
	api   string
	agent *proc
}

const statusAgentID = "agent-status"

func startStatusScenario(t *testing.T) *statusScenario {
	t.Helper()
	cp := &holdingControlPlane{cp: controlplane.New("", controlplane.Faults{})}
	cp.h = cp.cp.Handler()
	srv := httptest.NewServer(cp)
	t.Cleanup(srv.Close)
	s := &statusScenario{cp: cp, cpURL: srv.URL}
	// The journal is shipped too, so the shipping slot and metrics are served (an endpoint that
	// takes everything: what arrives is otlp_test.go's concern).
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	t.Cleanup(sink.Close)
	data := filepath.Join(t.TempDir(), "data")
	run := func(cleanupWait string) (*proc, string) {
		a := startProc(t, "run", "--runtime", "sim", "--data-dir", data, "--backend", srv.URL, "--listen", "127.0.0.1:0",
			"--cleanup-wait", cleanupWait, "--log-format", "json", "--agent-id", statusAgentID, "--otlp-endpoint", sink.URL)
		m := a.await(t, "agent running", 30*time.Second)
		return a, "http://" + m["listen"].(string)
	}
	addTask := func(arn string, containers string) {
		postJSON(t, srv.URL+"/v1/tasks", map[string]any{"agent": statusAgentID, "task": jsonRaw(t,
			fmt.Sprintf(`{"arn":%q,"family":"status","desired_status":"RUNNING","containers":%s}`, arn, containers))})
	}

	// First run: a short cleanup wait, so task/cleaned runs, is acknowledged and cleaned.
	first, api := run("100ms")
	addTask("task/cleaned", `[{"name":"app","image":"web:1","command":["exit","0"]}]`)
	awaitKnown(t, api, "task/cleaned", "CLEANED", 30*time.Second)
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.cmd.Wait(); err != nil {
		t.Fatalf("agent after SIGTERM: %v\n%s", err, first.log())
	}

	// Second run: cleanup waits an hour, so acknowledged tasks rest in STOPPED_ACKED.
	s.agent, s.api = run("1h")
	addTask("task/running", `[{"name":"app","image":"web:1","command":["run"]},{"name":"sidecar","image":"log:1","command":["run"],"essential":false}]`)
	addTask("task/acked", `[{"name":"app","image":"web:1","command":["exit","0"]}]`)
	addTask("task/rejected", `[{"name":"bad name!","image":"web:1"}]`)
	awaitKnown(t, s.api, "task/running", "RUNNING", 30*time.Second)
	awaitKnown(t, s.api, "task/acked", "STOPPED_ACKED", 30*time.Second)
	awaitKnown(t, s.api, "task/rejected", "STOPPED_ACKED", 30*time.Second)

	// Now the control plane throttles everything: task/blocked stops and cannot be acknowledged.
	cp.hold.Store(true)
	addTask("task/blocked", `[{"name":"app","image":"web:1","command":["exit","3"]}]`)
	awaitKnown(t, s.api, "task/blocked", "STOPPED", 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for cp.held.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the agent sent no report to be throttled within 30 s\n%s", s.agent.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

func jsonRaw(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

// awaitKnown waits until the agent's API shows the task in the state.
func awaitKnown(t *testing.T, api, arn, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var v struct {
			KnownStatus string `json:"known_status"`
		}
		code := getJSON(t, api+"/v1/tasks/"+arn, &v)
		if code == 200 && v.KnownStatus == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not %s within %v (HTTP %d, %q)", arn, want, within, code, v.KnownStatus)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// apiCounts is what the JSON API and /metrics say: tasks by known status, tasks blocked on
// their acknowledgement, the outbox, tombstones, throttled reports.
func apiCounts(t *testing.T, api string) (map[string]int, int, map[string]float64) {
	t.Helper()
	var tasks struct {
		Tasks []struct {
			KnownStatus     string `json:"known_status"`
			BlockedOnAckFor string `json:"blocked_on_ack_for"`
		}
	}
	if code := getJSON(t, api+"/v1/tasks", &tasks); code != 200 {
		t.Fatalf("/v1/tasks: HTTP %d", code)
	}
	byState, blocked := map[string]int{}, 0
	for _, task := range tasks.Tasks {
		byState[task.KnownStatus]++
		if task.BlockedOnAckFor != "" {
			blocked++
		}
	}
	return byState, blocked, scrape(t, api)
}

// scrape reads /metrics into name{labels} → value.
func scrape(t *testing.T, api string) map[string]float64 {
	t.Helper()
	resp, err := ownClient.Get(api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// chromiumPath finds the browser the status page test drives; "" when there is none.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactDir is where the browser test keeps its screenshots: $AGENTD_ARTIFACTS when CI sets
// it (kept after the run), else the test's own temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("AGENTD_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestStatusPageInABrowser drives headless Chromium against a running agent with tasks in
// every resting state: the page loads without a console error, a failed load or a CSP
// violation; it shows the numbers the JSON API and /metrics show; a task's timeline renders;
// and when tasks change state (the control plane stops throttling, a task is stopped) the
// page shows it by itself, without being reloaded.
func TestStatusPageInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("status page in a browser: spawns the agent and Chromium")
	}
	t.Parallel()
	browser := chromiumPath()
	if browser == "" {
		t.Skip("status page browser test skipped: no chromium on PATH (Debian: apt-get install -y chromium; .ci/run installs it)")
	}
	s := startStatusScenario(t)
	page := openStatusPage(t, browser, s.api)

	// While the control plane throttles, nothing moves but the retry counters, so the page's
	// numbers can be compared with the API's exactly.
	page.showsTheAPIsNumbers(t, s.api)
	page.opensTheTimelineOfTheBlockedTask(t, s.api)
	page.screenshot(t, "status-page-throttled.png")
	page.browserReportedNothing(t, "loading the page and a timeline")

	// Tasks change state: the control plane lets reports through (task/blocked is
	// acknowledged) and stops task/running. The page follows by itself.
	s.cp.hold.Store(false)
	if err := s.cp.cp.StopTask("task/running"); err != nil {
		t.Fatal(err)
	}
	page.followsTheChangeWithoutReloading(t, s.api)
	page.screenshot(t, "status-page-settled.png")
	page.browserReportedNothing(t, "updating the page")
}

// statusPage is the status page open in headless Chromium, with what the browser reported
// (console errors and warnings, exceptions, failed loads, CSP violations) gathered as it runs.
type statusPage struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
	shots    string // where screenshots go
}

// openStatusPage starts the browser on the agent's page and waits until the page shows the
// counts and, filled in by its script, the tasks; then marks the document, so a page that
// reloads itself instead of updating loses the mark.
func openStatusPage(t *testing.T, browser, api string) *statusPage {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
			chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 1400))...)
	t.Cleanup(cancelAlloc)
	p := &statusPage{shots: artifactDir(t)}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(p.listen))
	t.Cleanup(cancel)
	p.ctx = ctx
	// The first Run starts the browser: no timeout on it (it would end the browser).
	if err := chromedp.Do(ctx, chromedp.Navigate(api+"/")); err != nil {
		t.Fatalf("navigate to the status page: %v", err)
	}
	if _, err := chromedp.Run(p.within(t, 20*time.Second), chromedp.Poll[bool](`document.querySelector("#count-RUNNING") !== null`)); err != nil {
		t.Fatalf("the status page shows no task counts: %v", err)
	}
	// Root's browser navigates without Agentd-Client, so the page arrives with counts only;
	// its script (which sends the header) fills in the tasks at once.
	if _, err := chromedp.Run(p.within(t, 20*time.Second), chromedp.Poll[bool](`document.querySelector("#tasks tr[data-arn]") !== null && document.querySelector("#tasks-limited") === null`)); err != nil {
		t.Fatalf("the status page shows no tasks to root's browser: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`window.agentdNotReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *statusPage) listen(ev any) {
	note := func(s string) { p.mu.Lock(); p.problems = append(p.problems, s); p.mu.Unlock() }
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value))
			}
			note(fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
		}
	case *runtime.EventExceptionThrown:
		note("exception: " + (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
			note(fmt.Sprintf("log %s (%s): %s %s", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	}
}

// within bounds one browser step; the bound ends with the test.
func (p *statusPage) within(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(p.ctx, d)
	t.Cleanup(cancel)
	return c
}

func (p *statusPage) browserReportedNothing(t *testing.T, when string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.problems) > 0 {
		t.Fatalf("%s: the browser reported:\n  %s", when, strings.Join(p.problems, "\n  "))
	}
}

func (p *statusPage) screenshot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(p.within(t, 20*time.Second), chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(p.shots, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// numbers reads what the page shows: every [data-value] by id, the overall health, and each
// task's known status as "task:<arn>".
func (p *statusPage) numbers(t *testing.T) map[string]string {
	t.Helper()
	v, err := chromedp.Run(p.within(t, 10*time.Second), chromedp.Evaluate[map[string]string](`(() => {
		const out = {};
		for (const el of document.querySelectorAll("[data-value]")) out[el.id] = el.dataset.value;
		out["health-overall"] = document.querySelector("#health-overall").textContent;
		for (const tr of document.querySelectorAll("#tasks tr[data-arn]")) out["task:" + tr.dataset.arn] = tr.dataset.known;
		return out;
	})()`))
	if err != nil {
		t.Fatalf("reading the page: %v", err)
	}
	return v
}

// showsTheAPIsNumbers: the counts by state, tombstones, tasks blocked on their
// acknowledgement, the outbox and the reporting streak are the ones /v1/tasks and /metrics
// give, and each task's row shows its resting state.
func (p *statusPage) showsTheAPIsNumbers(t *testing.T, api string) {
	t.Helper()
	page := p.numbers(t)
	byState, blocked, metrics := apiCounts(t, api)
	for _, st := range []string{"NONE", "PULLED", "CREATED", "RUNNING", "STOPPED", "STOPPED_ACKED", "CLEANING"} {
		if page["count-"+st] != strconv.Itoa(byState[st]) {
			t.Errorf("page shows %s tasks %s; /v1/tasks has %d", st, page["count-"+st], byState[st])
		}
		if m := metrics[`agentd_tasks{status="`+st+`"}`]; page["count-"+st] != strconv.Itoa(int(m)) {
			t.Errorf("page shows %s tasks %s; /metrics has %v", st, page["count-"+st], m)
		}
	}
	for st, want := range map[string]int{"RUNNING": 1, "STOPPED": 1, "STOPPED_ACKED": 2} {
		if byState[st] != want {
			t.Errorf("scenario: %d tasks %s; want %d", byState[st], st, want)
		}
	}
	if page["count-CLEANED"] != strconv.Itoa(int(metrics["agentd_tombstones"])) || page["count-CLEANED"] != "1" {
		t.Errorf("page shows CLEANED %s; /metrics agentd_tombstones %v; want 1", page["count-CLEANED"], metrics["agentd_tombstones"])
	}
	if page["blocked-count"] != strconv.Itoa(blocked) || blocked != 1 || metrics["agentd_tasks_blocked_on_ack"] != 1 {
		t.Errorf("page shows %s blocked on ack; /v1/tasks has %d, /metrics %v; want 1", page["blocked-count"], blocked, metrics["agentd_tasks_blocked_on_ack"])
	}
	if page["outbox-count"] != strconv.Itoa(int(metrics["agentd_outbox_changes"])) || page["outbox-count"] == "0" {
		t.Errorf("page shows outbox %s; /metrics agentd_outbox_changes %v (want equal, not 0)", page["outbox-count"], metrics["agentd_outbox_changes"])
	}
	if page["reports-streak"] != "throttled" {
		t.Errorf("page shows the reporting streak %q; want throttled", page["reports-streak"])
	}
	if n, _ := strconv.Atoi(page["reports-throttled"]); n < 1 || float64(n) > metrics[`agentd_reports_total{outcome="throttled"}`] {
		t.Errorf("page shows %s throttled reports; /metrics (read later) %v", page["reports-throttled"], metrics[`agentd_reports_total{outcome="throttled"}`])
	}
	if page["journal-seq"] == "" || page["health-overall"] == "" {
		t.Errorf("page lacks the journal sequence or the overall health: %v", page)
	}
	for arn, want := range map[string]string{"task/running": "RUNNING", "task/blocked": "STOPPED", "task/acked": "STOPPED_ACKED", "task/rejected": "STOPPED_ACKED"} {
		if page["task:"+arn] != want {
			t.Errorf("page shows %s as %q; want %s", arn, page["task:"+arn], want)
		}
	}
}

// opensTheTimelineOfTheBlockedTask: opened, a task's timeline loads the SVG `agentd journal
// timeline --svg` draws; for a task blocked on its acknowledgement it shows that the task
// ran, stopped, and its reports were throttled (the red bar), and no acknowledgement.
func (p *statusPage) opensTheTimelineOfTheBlockedTask(t *testing.T, api string) {
	t.Helper()
	if err := chromedp.Do(p.within(t, 10*time.Second), chromedp.Click(chromedp.CSS(`details[data-arn="task/blocked"] summary`))); err != nil {
		t.Fatalf("opening the timeline of task/blocked: %v", err)
	}
	size, err := chromedp.Run(p.within(t, 15*time.Second), chromedp.Poll[[]int](`(() => {
		const img = document.querySelector('details[data-arn="task/blocked"] img');
		return img && img.complete && img.naturalWidth > 0 ? [img.naturalWidth, img.naturalHeight] : null;
	})()`))
	if err != nil {
		t.Fatalf("the timeline of task/blocked did not render: %v", err)
	}
	if size[0] < 400 || size[1] < 100 {
		t.Errorf("timeline drawn %dx%d; want a real drawing", size[0], size[1])
	}
	svg := fetch(t, api+"/status/timeline.svg?task="+url.QueryEscape("task/blocked"))
	for _, want := range []string{"<svg", "task/blocked", "RUNNING", "STOPPED", `fill="#d62728"`} {
		if !strings.Contains(svg, want) {
			t.Errorf("timeline SVG lacks %q", want)
		}
	}
	if strings.Contains(svg, "STOPPED_ACKED") {
		t.Error("timeline SVG of a blocked task shows STOPPED_ACKED")
	}
}

// followsTheChangeWithoutReloading: after the change the page, by itself and in place (the
// mark set at load survives, the open timeline stays open), shows both tasks
// STOPPED_ACKED, nothing blocked, no throttled streak; the open timeline is redrawn and
// shows the acknowledgement; and the page's count agrees with the API's.
func (p *statusPage) followsTheChangeWithoutReloading(t *testing.T, api string) {
	t.Helper()
	if _, err := chromedp.Run(p.within(t, 45*time.Second), chromedp.Poll[bool](`(() => {
		const known = (arn) => { const tr = document.querySelector('#tasks tr[data-arn="' + arn + '"]'); return tr && tr.dataset.known; };
		return known("task/blocked") === "STOPPED_ACKED" && known("task/running") === "STOPPED_ACKED" &&
			document.querySelector("#blocked-count").dataset.value === "0" && document.querySelector("#reports-streak").dataset.value === "" &&
			Number(document.body.dataset.refreshed) >= 2;
	})()`, chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		t.Fatalf("the page did not show the tasks' new states by itself: %v\npage: %v", err, p.numbers(t))
	}
	if kept, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`window.agentdNotReloaded === true && document.querySelector('details[data-arn="task/blocked"]').open`)); err != nil || !kept {
		t.Errorf("the page reloaded or closed the open timeline instead of updating in place (%v)", err)
	}
	src, err := chromedp.Run(p.within(t, 15*time.Second), chromedp.Poll[string](`(() => {
		const img = document.querySelector('details[data-arn="task/blocked"] img');
		return img && img.complete && img.naturalWidth > 0 && img.dataset.shown === img.dataset.src ? img.dataset.shown : "";
	})()`))
	if err != nil {
		t.Fatalf("the open timeline is not drawn after the page refreshed: %v", err)
	}
	if svg := fetch(t, api+src); !strings.Contains(svg, "STOPPED_ACKED") {
		t.Errorf("the open timeline (%s) does not show the acknowledgement", src)
	}
	page := p.numbers(t)
	byState, _, _ := apiCounts(t, api)
	if page["count-STOPPED_ACKED"] != strconv.Itoa(byState["STOPPED_ACKED"]) || byState["STOPPED_ACKED"] != 4 {
		t.Errorf("after the change: page shows %s STOPPED_ACKED, API %d; want 4", page["count-STOPPED_ACKED"], byState["STOPPED_ACKED"])
	}
}

func fetch(t *testing.T, u string) string {
	t.Helper()
	resp, err := ownClient.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: HTTP %d: %s", u, resp.StatusCode, b.String())
	}
	return b.String()
}
