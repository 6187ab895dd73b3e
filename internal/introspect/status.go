package introspect

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/fsm"
)

// The status page at / is for a person on the host: the same facts as /healthz, /v1/tasks and
// /metrics, drawn as one HTML page that refreshes itself. It loads nothing from outside the
// agent (a Content-Security-Policy of 'self' says so to the browser), and its script only
// re-fetches the page's own main part and the timelines' drawings and draws nothing itself, so
// it works without any framework and, with scripting off, still shows a correct page (just not
// a refreshing one; for root without the token, the counts only: a browser's own requests never
// carry Agentd-Client, which root's loopback connection needs to read tasks — access.go).

//go:embed status.html status.css status.js
var statusFiles embed.FS

var statusTemplate = template.Must(template.New("status.html").Funcs(template.FuncMap{
	"ago":   func(d time.Duration) string { return roundDuration(d).String() },
	"time":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
	"lower": strings.ToLower,
	"taskURL": func(arn string) string { // each segment escaped: an ARN may hold ? or #
		segs := strings.Split(arn, "/")
		for i, seg := range segs {
			segs[i] = url.PathEscape(seg)
		}
		return "/v1/tasks/" + strings.Join(segs, "/")
	},
}).ParseFS(statusFiles, "status.html"))

// statusTaskLimit caps the task table: a host with thousands of tasks gets the ones that need
// attention (blocked on an acknowledgement first) and a pointer to /v1/tasks for the rest.
const statusTaskLimit = 200

// statusStates are the task states the page counts, in lifecycle order; CLEANED counts the
// tombstones.
var statusStates = []event.Status{event.StatusNone, event.StatusPulled, event.StatusCreated, event.StatusRunning,
	event.StatusStopped, event.StatusStoppedAcked, event.StatusCleaning, event.StatusCleaned}

type statusPage struct {
	Info       Info
	Limited    bool // a caller without credentials: counts only (access.go)
	BlockedN   int
	AgentID    string
	Now        time.Time
	Ready      bool
	Healthy    bool
	Problem    string // why the page could not read the projection ("" when it could)
	Health     []healthRow
	Seq        uint64
	States     []stateCount
	Live       int
	Blocked    []taskRow
	Longest    time.Duration
	Outbox     int
	Oldest     *outboxChange
	Reporting  reportingView
	Tasks      []taskRow
	MoreTasks  int
	RefreshMS  int
	Tombstones int
}

type healthRow struct {
	Source   string
	Problem  string
	Degraded bool // a problem that does not make the agent unhealthy (OTLP shipping): shown as a warning
	For      time.Duration
}

type stateCount struct {
	Status event.Status
	Count  int
}

type outboxChange struct {
	At     time.Time
	Age    time.Duration
	Change string
}

type reportingView struct {
	engine.Reporting
	StreakFor time.Duration
	NextIn    time.Duration
	Other     uint64 // unsettled answers that were not throttling (5xx, network, refused)
}

type taskRow struct {
	ARN, Family, Reason         string
	Known, Desired, Sent        event.Status
	Containers                  string
	BlockedFor                  time.Duration
	StoppedAt, CleanupDue       time.Time
	TimelineURL, TimelineAnchor string
}

// registerStatus adds the status page, its two static files and the timeline drawings to mux.
func registerStatus(mux *http.ServeMux, e *engine.Engine, info Info, cfg fsm.Config) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		page := buildStatus(r.Context(), e, info, cfg)
		if limited(r.Context()) {
			page.limit()
		}
		name := "page"
		if r.URL.Query().Get("part") == "main" {
			name = "main" // the script's refresh: only what changes
		}
		var b bytes.Buffer
		if err := statusTemplate.ExecuteTemplate(&b, name, page); err != nil {
			http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		statusHeaders(w, "text/html; charset=utf-8")
		if name == "page" {
			w.Header().Set("Clear-Site-Data", `"storage"`) // serviceworker.go: no other worker of this origin
		}
		if page.Problem != "" && name == "page" {
			// The page says 503 like /healthz; the script's refresh gets 200, so a browser
			// console stays clean while the fragment shows what is wrong.
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write(b.Bytes())
	})
	// /signin needs credentials (access.go): a browser without them is asked for the token
	// (Basic), for the whole origin; with them, back to the page, which now shows the tasks.
	mux.HandleFunc("GET /signin", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
	for _, f := range []struct{ path, file, ctype string }{
		{"/status.css", "status.css", "text/css; charset=utf-8"},
		{"/status.js", "status.js", "text/javascript; charset=utf-8"},
	} {
		body, _ := statusFiles.ReadFile(f.file)
		mux.HandleFunc("GET "+f.path, func(w http.ResponseWriter, r *http.Request) {
			statusHeaders(w, f.ctype)
			_, _ = w.Write(body)
		})
	}
	mux.HandleFunc("GET /status/timeline.svg", func(w http.ResponseWriter, r *http.Request) {
		task := r.URL.Query().Get("task")
		if task == "" {
			http.Error(w, "task: missing (…/timeline.svg?task=ARN)", http.StatusBadRequest)
			return
		}
		// Only a live task is drawn, from its first record (the projection knows it), reading
		// at most a bounded number of records: a request never scans the whole journal.
		var from uint64
		qctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		qerr := e.Query(qctx, func(st *fsm.State) {
			if t, ok := st.Tasks[task]; ok {
				from = t.AddedSeq
			}
		})
		cancel()
		if qerr != nil {
			http.Error(w, qerr.Error(), http.StatusServiceUnavailable)
			return
		}
		if from == 0 {
			http.Error(w, "task "+strconv.Quote(task)+": no live task by that name (a cleaned task's timeline: agentd journal timeline)", http.StatusNotFound)
			return
		}
		limit := info.TimelineMaxRecords
		if limit <= 0 {
			limit = DefaultTimelineMaxRecords
		}
		tl, err := forensics.BuildTimelineWithin(e.Journal(), task, from, limit)
		if errors.Is(err, forensics.ErrTimelineBound) {
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		var b bytes.Buffer
		if err := tl.WriteSVG(&b); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		statusHeaders(w, "image/svg+xml")
		// The page asks with the journal's sequence number in the URL, so one URL always
		// draws the same: the browser may keep it, and the refresh swaps drawings without a gap.
		w.Header().Set("Cache-Control", "private, max-age=600")
		_, _ = w.Write(b.Bytes())
	})
}

// statusHeaders: nothing from elsewhere, nothing cached (the page is a live view), not framed.
func statusHeaders(w http.ResponseWriter, ctype string) {
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

func buildStatus(ctx context.Context, e *engine.Engine, info Info, cfg fsm.Config) statusPage {
	now := e.Now()
	p := statusPage{Info: info, AgentID: e.AgentID(), Now: now, Ready: e.Ready(), RefreshMS: 2000}
	for _, s := range e.Health() {
		row := healthRow{Source: string(s.Source), Problem: s.Problem, Degraded: s.Degraded}
		if s.Problem != "" && !s.Since.IsZero() {
			row.For = now.Sub(s.Since)
		}
		p.Health = append(p.Health, row)
	}
	if !p.Ready {
		p.Problem = "recovering: the journal is being replayed; nothing is shown from a half-recovered state"
		return p
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := e.QueryWithReporting(qctx, func(st *fsm.State, rep engine.Reporting) {
		p.Seq, p.Live, p.Tombstones = st.LastSeq, len(st.Tasks), len(st.Tombstones)
		counts := map[event.Status]int{event.StatusCleaned: len(st.Tombstones)}
		var rows []taskRow
		for _, t := range st.SortedTasks() {
			counts[t.Known]++
			row := taskView(st, t, now, cfg)
			if row.BlockedFor > 0 {
				p.Blocked = append(p.Blocked, row)
				p.Longest = max(p.Longest, row.BlockedFor)
			}
			rows = append(rows, row)
		}
		for _, s := range statusStates {
			p.States = append(p.States, stateCount{s, counts[s]})
		}
		p.BlockedN = len(p.Blocked)
		slices.SortStableFunc(p.Blocked, func(a, b taskRow) int { return int(b.BlockedFor - a.BlockedFor) })
		// Tasks that need attention first: blocked on an acknowledgement, longest first.
		slices.SortStableFunc(rows, func(a, b taskRow) int { return int(b.BlockedFor - a.BlockedFor) })
		if len(rows) > statusTaskLimit {
			p.MoreTasks, rows = len(rows)-statusTaskLimit, rows[:statusTaskLimit]
		}
		p.Tasks = rows
		p.Outbox = st.OutboxLen()
		if at := st.OldestUnsent(); !at.IsZero() {
			if pending := st.Pending(1); len(pending) == 1 {
				p.Oldest = &outboxChange{At: at, Age: now.Sub(at), Change: pending[0].String()}
			}
		}
		p.Reporting = reportingView{Reporting: rep, Other: rep.Failed - rep.Throttled}
		if !rep.StreakSince.IsZero() {
			p.Reporting.StreakFor = now.Sub(rep.StreakSince)
		}
		if !rep.NextAttempt.IsZero() {
			p.Reporting.NextIn = rep.NextAttempt.Sub(now)
		}
	})
	if err != nil {
		p.Problem = "the engine's loop did not answer: " + err.Error()
		return p
	}
	p.Healthy = e.Unhealthy() == ""
	return p
}

// limit keeps what a caller without credentials may see: counts, which sources are healthy
// and reporting, but no task, reason, change or health problem (they carry a task's history,
// or name it).
func (p *statusPage) limit() {
	p.Limited, p.Blocked, p.Tasks, p.MoreTasks = true, nil, nil, 0
	for i := range p.Health {
		if p.Health[i].Problem != "" {
			p.Health[i].Problem = hiddenDetail
		}
	}
	if p.Oldest != nil {
		p.Oldest.Change = ""
	}
}

func taskView(st *fsm.State, t *fsm.Task, now time.Time, cfg fsm.Config) taskRow {
	row := taskRow{ARN: t.ARN, Family: t.Family, Reason: t.Reason, Known: t.Known, Desired: t.Desired, Sent: t.Sent,
		BlockedFor:     st.BlockedOnAck(t, now),
		TimelineURL:    "/status/timeline.svg?task=" + url.QueryEscape(t.ARN) + "&seq=" + strconv.FormatUint(st.LastSeq, 10),
		TimelineAnchor: "timeline-" + anchorOf(t.ARN)}
	if !t.StoppedAt.IsZero() {
		row.StoppedAt, row.CleanupDue = t.StoppedAt, t.CleanupDue(cfg)
	}
	var cs []string
	for _, c := range t.Containers {
		s := c.Name + " " + string(c.Known)
		if c.ExitCode != nil {
			s += fmt.Sprintf(" (exit %d)", *c.ExitCode)
		}
		if w, ok := t.Waiting(c, now); ok {
			s += " (" + w.Reason(now) + ")"
		}
		cs = append(cs, s)
	}
	row.Containers = strings.Join(cs, ", ")
	return row
}

// roundDuration keeps durations readable: milliseconds under a minute, seconds above.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// anchorOf makes an ARN usable as an element id: every byte outside [A-Za-z0-9] as its hex.
func anchorOf(arn string) string {
	var b strings.Builder
	for i := 0; i < len(arn); i++ {
		c := arn[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return b.String()
}
