package engine

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// HealthSource names one thing the agent depends on. Each source's slot is set and cleared
// only by the code that owns that source, so a success of one never hides a failure of
// another (a runtime call that works says nothing about the exit stream).
type HealthSource string

const (
	HealthJournal      HealthSource = "journal"       // commits to the journal file
	HealthRuntime      HealthSource = "runtime"       // runtime calls (pull, create, start, stop, remove)
	HealthExitStream   HealthSource = "exit_stream"   // the runtime's stream of container exits
	HealthControlPlane HealthSource = "control_plane" // reports answered, not refused as malformed
	HealthCredentials  HealthSource = "credentials"   // the control plane accepts the agent's token
	HealthCore         HealthSource = "core"          // the projection accepts every record the core makes (quarantine.go)
	// HealthJournalBudget: the journal fits --journal-max-bytes once cleaned tasks' history is
	// dropped; a problem when the live tasks' history alone needs more (issue 25).
	HealthJournalBudget HealthSource = "journal_budget"
)

// HealthOTLP is the journal's shipping to an OTLP endpoint (PROTOCOL.md 1.2 §5). It is listed
// only when shipping is configured (RegisterDegradedSource) and is only ever degraded: a log
// pipeline that is down never makes the agent unhealthy, its job goes on.
const HealthOTLP HealthSource = "otlp"

// HealthCoreRefusals names the payload records the core made and the projection refused
// that the journal remembers from before this process (quarantine.go): always listed, only
// ever degraded — their tasks were decided afresh at the restart, nothing waits on them, and
// an agent kept unhealthy for the retention (a week) would be restarted in a loop by its
// liveness probe. A refusal in this process is in the core slot, unhealthy.
const HealthCoreRefusals HealthSource = "core_refusals"

// HealthSources are every source, in the order /healthz and the status page list them.
var HealthSources = []HealthSource{HealthJournal, HealthRuntime, HealthExitStream, HealthControlPlane, HealthCredentials, HealthCore, HealthJournalBudget}

// HealthSlot is one source's state: Problem is "" while it works; Since is when the current
// problem began (zero while healthy).
type HealthSlot struct {
	Source  HealthSource `json:"source"`
	Problem string       `json:"problem,omitempty"`
	Since   time.Time    `json:"since,omitzero"`
	// Degraded: the problem is shown and exported but does not make the agent unhealthy.
	Degraded bool `json:"degraded,omitempty"`
}

// health holds one slot per source. It is written by the loop and its helpers (poller, exit
// watcher) and read by the introspection API and metrics, so it has its own lock.
type health struct {
	mu       sync.Mutex
	slots    map[HealthSource]HealthSlot
	degraded []HealthSource // listed after HealthSources; their problems never make the agent unhealthy
}

// set records a problem of a source; a repeat of a standing problem keeps its Since.
func (h *health) set(src HealthSource, problem string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.slots == nil {
		h.slots = map[HealthSource]HealthSlot{}
	}
	since := now
	if old, ok := h.slots[src]; ok && old.Problem != "" {
		since = old.Since
	}
	h.slots[src] = HealthSlot{Source: src, Problem: problem, Since: since, Degraded: slices.Contains(h.degraded, src)}
}

// clear marks a source healthy.
func (h *health) clear(src HealthSource) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.slots, src)
}

// snapshot is every source's slot, healthy ones included, in HealthSources order.
func (h *health) snapshot() []HealthSlot {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HealthSlot, 0, len(HealthSources))
	for _, src := range HealthSources {
		if s, ok := h.slots[src]; ok {
			out = append(out, s)
		} else {
			out = append(out, HealthSlot{Source: src})
		}
	}
	for _, src := range h.degraded {
		if s, ok := h.slots[src]; ok {
			out = append(out, s)
		} else {
			out = append(out, HealthSlot{Source: src, Degraded: true})
		}
	}
	return out
}

// RegisterDegradedSource lists a source whose problems degrade the agent without making it
// unhealthy (HealthOTLP when shipping is configured; HealthCoreRefusals always is).
func (e *Engine) RegisterDegradedSource(src HealthSource) {
	e.health.mu.Lock()
	defer e.health.mu.Unlock()
	if !slices.Contains(e.health.degraded, src) {
		e.health.degraded = append(e.health.degraded, src)
	}
}

// SetDegraded records the problem of a degraded-only source ("" clears it). Safe from any
// goroutine.
func (e *Engine) SetDegraded(src HealthSource, problem string) {
	if problem == "" {
		e.health.clear(src)
		return
	}
	e.health.set(src, problem, e.clock.Now())
}

// Health is every source's slot, healthy ones included, in HealthSources order.
func (e *Engine) Health() []HealthSlot { return e.health.snapshot() }

// Unhealthy is "" when every source works, else each problem prefixed by its source, in
// HealthSources order ("runtime: ...; control_plane: ...").
func (e *Engine) Unhealthy() string { return Problems(e.health.snapshot(), false) }

// Degraded is Unhealthy for the degraded-only sources: their problems, which leave the agent
// healthy ("core_refusals: ...; otlp: ...").
func (e *Engine) Degraded() string { return Problems(e.health.snapshot(), true) }

// Problems words the problems of slots, of the degraded-only sources or of the others.
func Problems(slots []HealthSlot, degraded bool) string {
	var parts []string
	for _, s := range slots {
		if s.Problem != "" && s.Degraded == degraded {
			parts = append(parts, string(s.Source)+": "+s.Problem)
		}
	}
	return strings.Join(slices.Clip(parts), "; ")
}
