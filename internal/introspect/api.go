// Package introspect serves the agent's introspection API on --listen: /healthz,
// /v1/metadata, /v1/tasks, /v1/tasks/{arn}, /v1/tasks/{arn}/containers/{name}/logs,
// /v1/journal/export and /metrics.
//
// It promises never to answer from a half-recovered state: until the engine has recovered,
// /healthz and /v1/tasks answer 503. Reads go through the engine's loop, so they see a
// projection between records, never inside one.
//
// It promises too that only its own names are answered and only callers with credentials
// read tasks, output or the journal (access.go, owners.go), and that no client holds it:
// every kind of long request has its own bounded pool (bounds.go).
package introspect

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/runtime"
)

// Info is static metadata about the agent.
type Info struct {
	Version string
	DataDir string
	Runtime string
	Logs    runtime.Runtime // whose container logs the logs endpoint serves; nil: it answers 501
	// TimelineMaxRecords bounds the journal records one status/timeline.svg request reads
	// (0: DefaultTimelineMaxRecords); a task with more is answered 422 naming the bound.
	TimelineMaxRecords int
}

// DefaultTimelineMaxRecords is the bound of one timeline drawing of the status page.
const DefaultTimelineMaxRecords = 200_000

// TaskView is a task as the API shows it.
type TaskView struct {
	ARN           string       `json:"arn"`
	KnownStatus   event.Status `json:"known_status"`
	DesiredStatus event.Status `json:"desired_status"`
	SentStatus    event.Status `json:"sent_status"`
	Reason        string       `json:"reason,omitempty"`
	// Quarantined says why the agent makes no further runtime call for the task: the core made
	// a record about it the projection refused (a bug; the core health slot names it too).
	Quarantined     string          `json:"quarantined,omitempty"`
	StoppedAt       *time.Time      `json:"stopped_at"`
	CleanupDue      *time.Time      `json:"cleanup_due"`
	BlockedOnAckFor string          `json:"blocked_on_ack_for"`
	Containers      []ContainerView `json:"containers"`
}

// ContainerView is a container as the API shows it.
type ContainerView struct {
	Name        string       `json:"name"`
	KnownStatus event.Status `json:"known_status"`
	SentStatus  event.Status `json:"sent_status"`
	ExitCode    *int         `json:"exit_code"`
	RuntimeID   string       `json:"runtime_id"`
	Reason      string       `json:"reason"`
	// ImageID and ImageDigest are the image its reference resolved to when it was pulled
	// (empty before): the digest is what actually ran, whatever the tag points to since.
	ImageID     string `json:"image_id,omitempty"`
	ImageDigest string `json:"image_digest,omitempty"`
	// Spec is the container as assigned (PROTOCOL.md §4), without env: values may be secrets.
	Spec event.ContainerSpec `json:"spec"`
	// WaitingFor is what a created container waits for before it may start (depends_on),
	// derived at the time of the request: "waiting for db HEALTHY, 3m12s (db is RUNNING, UNHEALTHY)".
	WaitingFor string `json:"waiting_for,omitempty"`
}

func view(st *fsm.State, t *fsm.Task, now time.Time, cfg fsm.Config) TaskView {
	v := TaskView{ARN: t.ARN, KnownStatus: t.Known, DesiredStatus: t.Desired, SentStatus: t.Sent, Reason: t.Reason, Containers: []ContainerView{}}
	if !t.StoppedAt.IsZero() {
		s, due := t.StoppedAt, t.CleanupDue(cfg)
		v.StoppedAt, v.CleanupDue = &s, &due
	}
	if d := st.BlockedOnAck(t, now); d > 0 {
		v.BlockedOnAckFor = d.Round(time.Millisecond).String()
	}
	for _, c := range t.Containers {
		spec := c.ContainerSpec
		spec.Env = nil
		v.Containers = append(v.Containers, ContainerView{Name: c.Name, KnownStatus: c.Known, SentStatus: c.Sent, ExitCode: c.ExitCode, RuntimeID: c.RuntimeID, Reason: c.Reason,
			ImageID: c.ImageID, ImageDigest: c.ImageDigest, Spec: spec})
		if w, ok := t.Waiting(c, now); ok {
			v.Containers[len(v.Containers)-1].WaitingFor = w.Reason(now)
		}
	}
	return v
}

// Handler builds the API over an engine.
func Handler(e *engine.Engine, info Info, cfg fsm.Config) http.Handler {
	mux := http.NewServeMux()
	query := func(w http.ResponseWriter, r *http.Request, f func(*fsm.State)) bool {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := e.Query(ctx, f); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return false
		}
		return true
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !e.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"healthy": false, "detail": "recovering"})
			return
		}
		slots := e.Health()
		if limited(r.Context()) {
			slots = openHealth(slots)
		}
		if h := engine.Problems(slots, false); h != "" {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"healthy": false, "detail": h, "sources": slots})
			return
		}
		// Prove the loop answers, not just that it once did.
		if query(w, r, func(*fsm.State) {}) {
			body := map[string]any{"healthy": true}
			if d := engine.Problems(slots, true); d != "" {
				body["degraded"] = d // healthy all the same: a warning (OTLP shipping, remembered refusals)
			}
			writeJSON(w, http.StatusOK, body)
		}
	})
	mux.HandleFunc("GET /v1/metadata", func(w http.ResponseWriter, r *http.Request) {
		var seq uint64
		if query(w, r, func(st *fsm.State) { seq = st.LastSeq }) {
			writeJSON(w, http.StatusOK, map[string]any{"agent_id": e.AgentID(), "version": info.Version, "journal_sequence": seq, "data_dir": info.DataDir, "runtime": info.Runtime})
		}
	})
	mux.HandleFunc("GET /v1/tasks", func(w http.ResponseWriter, r *http.Request) {
		now := e.Now()
		var out []TaskView
		if query(w, r, func(st *fsm.State) {
			out = make([]TaskView, 0, len(st.Tasks))
			for _, t := range st.SortedTasks() {
				v := view(st, t, now, cfg)
				v.Quarantined = e.Quarantined(t.ARN) // on the loop's goroutine, like st
				out = append(out, v)
			}
		}) {
			writeJSON(w, http.StatusOK, map[string]any{"tasks": out})
		}
	})
	mux.HandleFunc("GET /v1/tasks/{arn...}", func(w http.ResponseWriter, r *http.Request) {
		arn := r.PathValue("arn")
		if task, container, ok := logsPath(arn); ok {
			serveLogs(e, info.Logs, w, r, task, container)
			return
		}
		now := e.Now()
		var out any
		if !query(w, r, func(st *fsm.State) {
			if t, ok := st.Tasks[arn]; ok {
				v := view(st, t, now, cfg)
				v.Quarantined = e.Quarantined(t.ARN)
				out = v
			} else if ts, ok := st.Tombstones[arn]; ok {
				s := ts.StoppedAt()
				out = TaskView{ARN: arn, KnownStatus: event.StatusCleaned, DesiredStatus: event.StatusStopped, SentStatus: event.StatusStopped, Reason: st.TombstoneReason(ts), StoppedAt: &s, Containers: []ContainerView{}}
			}
		}) {
			return
		}
		if out == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no task " + arn})
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/journal/export", func(w http.ResponseWriter, r *http.Request) {
		// A consistent copy, while the agent keeps appending (export.go).
		if err := export(e.Journal(), w, r); err != nil {
			e.Logger().Warn().Err(err).Msg("journal export broke off")
		}
	})
	mux.HandleFunc("GET /v1/journal/records", func(w http.ResponseWriter, r *http.Request) {
		records(e.Journal(), w, r)
	})
	registerStatus(mux, e, info, cfg) // the status page at /, see status.go
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.Metrics().Registry, promhttp.HandlerOpts{}))
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
