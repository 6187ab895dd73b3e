package introspect

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/runtime"
)

// MultiplexedStream is the media type of the Docker Engine's multiplexed stdout/stderr
// stream. A client that accepts it (agentd logs) gets the frames as they are and
// demultiplexes them with stdcopy; any other gets both streams as plain text.
const MultiplexedStream = "application/vnd.docker.multiplexed-stream"

// logsPath reads "ARN/containers/NAME/logs", the rest of /v1/tasks/{arn...} for the logs of
// one container (ServeMux allows a multi-segment wildcard only at the end, and ARNs hold
// slashes).
func logsPath(rest string) (arn, container string, ok bool) {
	rest, found := strings.CutSuffix(rest, "/logs")
	if !found {
		return "", "", false
	}
	i := strings.LastIndex(rest, "/containers/")
	if i <= 0 {
		return "", "", false
	}
	arn, container = rest[:i], rest[i+len("/containers/"):]
	if container == "" || strings.Contains(container, "/") {
		return "", "", false
	}
	return arn, container, true
}

// serveLogs answers GET /v1/tasks/{arn}/containers/{name}/logs?tail=N&follow=1: the
// container's stdout and stderr while it exists on the runtime (until cleanup removes it).
func serveLogs(e *engine.Engine, src runtime.Runtime, w http.ResponseWriter, r *http.Request, arn, name string) {
	// A container writes what it likes: no browser may take it for HTML and run it.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if src == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "this agent serves no container logs"})
		return
	}
	opts := runtime.LogOptions{Tail: -1}
	if v := r.URL.Query().Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "tail: " + strconv.Quote(v) + " is not a count of lines ≥ 0"})
			return
		}
		opts.Tail = n
	}
	switch v := r.URL.Query().Get("follow"); v {
	case "", "0", "false":
	case "1", "true":
		opts.Follow = true
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "follow: " + strconv.Quote(v) + ", want 1 or 0"})
		return
	}
	var id, problem string
	status := http.StatusNotFound
	qctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	err := e.Query(qctx, func(st *fsm.State) {
		t, ok := st.Tasks[arn]
		switch {
		case !ok && st.Tombstones[arn] != nil:
			problem, status = "task "+arn+" is cleaned up: its containers and their logs are gone", http.StatusGone
		case !ok:
			problem = "no task " + arn
		case t.Container(name) == nil:
			problem = "task " + arn + " has no container " + name
		case t.Container(name).RuntimeID == "":
			problem = "container " + name + " of task " + arn + " was never created"
		default:
			id = t.Container(name).RuntimeID
		}
	})
	cancel()
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	if id == "" {
		writeJSON(w, status, map[string]string{"error": problem})
		return
	}
	rc, err := src.Logs(r.Context(), id, opts)
	if errors.Is(err, runtime.ErrNotFound) {
		writeJSON(w, http.StatusGone, map[string]string{"error": "container " + name + " of task " + arn + " is no longer on the runtime"})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	defer rc.Close()
	out := flushWriter{w: w, rc: http.NewResponseController(w)}
	if strings.Contains(r.Header.Get("Accept"), MultiplexedStream) {
		w.Header().Set("Content-Type", MultiplexedStream)
		w.WriteHeader(http.StatusOK)
		_, _ = io.Copy(out, rc)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = stdcopy.StdCopy(out, out, rc) // both streams, in the order they were written
}

// flushWriter sends every write at once, so a followed log reaches the client as it comes.
// Each write gets the server's write timeout afresh: a followed log may be quiet for longer
// than that, a client that stops reading still cannot hold the connection.
type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (fw flushWriter) Write(p []byte) (int, error) {
	_ = fw.rc.SetWriteDeadline(time.Now().Add(writeTimeout)) // not every ResponseWriter has one
	n, err := fw.w.Write(p)
	_ = fw.rc.Flush()
	return n, err
}
