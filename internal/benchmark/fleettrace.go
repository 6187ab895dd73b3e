package benchmark

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// A fleet's trace (FleetOptions.Trace, `agentd-bench fleet --trace FILE`) is one line per
// request the control plane saw and per moment of a scenario, in the order they happened:
// the per-second counts the bench prints say that a row missed, the trace says which agents
// came when and how they were answered. Lines are space-separated for awk:
//
//	<unix ms> <policy> <retry-after> report <agent> <status> [<Retry-After>]
//	<unix ms> <policy> <retry-after> poll <agent> <status>
//	<unix ms> <policy> <retry-after> held <report|poll> <agent> <unix ms it arrived>  (held by a hang, until its return or the agent's giving up)
//	<unix ms> <policy> <retry-after> mark <scenario NAME|stop|down|up|hang|release|exited>
//
// A mark's time is the bench's (the stop sent, the outage begun or ended, the containers
// exited); a request's is its answer's, or its cut's.

// fleetTrace writes one fleet's lines; nil writes nothing.
type fleetTrace struct {
	mu    sync.Mutex
	w     io.Writer
	fleet string // "<policy> <retry-after>"
}

func newFleetTrace(w io.Writer, policy, mode string) *fleetTrace {
	if w == nil {
		return nil
	}
	return &fleetTrace{w: w, fleet: policy + " " + mode}
}

func (t *fleetTrace) line(format string, a ...any) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%d %s "+format+"\n", append([]any{time.Now().UnixMilli(), t.fleet}, a...)...)
}

func (t *fleetTrace) mark(what string) { t.line("mark %s", what) }

// answered traces a request the control plane answered with sw's status.
func (t *fleetTrace) answered(r *http.Request, sw *statusWriter) {
	kind, agent := requestOf(r)
	code := sw.code
	if code == 0 {
		code = http.StatusOK // a body written with no header named
	}
	if ra := sw.Header().Get("Retry-After"); ra != "" {
		t.line("%s %s %d %s", kind, agent, code, ra)
		return
	}
	t.line("%s %s %d", kind, agent, code)
}

// held traces a request held by a hanging control plane, cut now.
func (t *fleetTrace) held(r *http.Request, arrived time.Time) {
	kind, agent := requestOf(r)
	t.line("held %s %s %d", kind, agent, arrived.UnixMilli())
}

// requestOf names a request's kind and agent from its path (/v1/agents/ID/state-changes,
// /v1/agents/ID/payloads); another path is "other" and itself.
func requestOf(r *http.Request) (kind, agent string) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) == 4 && parts[1] == "agents" {
		switch parts[3] {
		case "state-changes":
			return "report", parts[2]
		case "payloads":
			return "poll", parts[2]
		}
	}
	return "other", r.URL.Path
}
