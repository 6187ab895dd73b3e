package engine

import "time"

// memory gives back to the OS the heap a burst of tasks left behind, once the loop is idle.
// The Go runtime keeps freed heap resident and returns it only slowly, and an idle agent
// collects only every two minutes: after 20,000 tasks went through at once the agent held
// 99–139 MB where, restarted on the same journal, it needs about 40 (issue 25, bench rss).
// So once the live tasks have fallen by releaseAfterTasks from their most since the last
// release — a burst went through, and what it held is garbage — and the loop has journaled
// nothing for releaseIdle, the engine calls Config.ReleaseMemory (debug.FreeOSMemory: one
// full collection, tens of milliseconds on the loop at that size) once. A steady stream of
// tasks never triggers it: its live count does not fall by that much, and what it frees the
// runtime reuses.
type memory struct {
	most     int       // the most live tasks since the last release
	lastBusy time.Time // when a burst last journaled
}

const (
	releaseAfterTasks = 1000
	releaseIdle       = 5 * time.Second
)

// observe notes a burst's end: how many tasks are live, and whether it journaled.
func (m *memory) observe(now time.Time, live int, journaled bool) {
	m.most = max(m.most, live)
	if journaled {
		m.lastBusy = now
	}
}

// due is when the memory a burst left behind is to be released (zero: none is).
func (m *memory) due(live int) time.Time {
	if m.most-live < releaseAfterTasks {
		return time.Time{}
	}
	return m.lastBusy.Add(releaseIdle)
}

// releaseIfIdle releases the memory a burst left behind once the loop has been idle long
// enough, and counts it.
func (e *Engine) releaseIfIdle(now time.Time) {
	live := len(e.st.Tasks)
	if at := e.mem.due(live); at.IsZero() || now.Before(at) {
		return
	}
	e.mem.most = live
	e.cfg.ReleaseMemory()
	e.metrics.memoryReleases.Inc()
}
