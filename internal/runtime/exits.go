package runtime

import (
	"slices"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// What a runtime's streams carry: exits, read from a cursor so none is lost across a
// resubscription (ExitMark), and health verdicts.

// Exit is a container that stopped, as seen in the runtime's event stream.
type Exit struct {
	ID        string
	Task      string
	Container string
	ExitCode  int
	OOMKilled bool // killed for going over its memory limit: report a reason starting OutOfMemory
	// Reason says what is known of an exit's cause where that matters ("": nothing to add):
	// a SIGKILL under a memory limit that neither the engine nor the kernel's OOM
	// notification could be asked about is said to be of unknown cause (OOMUnknown).
	Reason string
	At     time.Time
	Cursor int64 // the stream's position at this exit: it resumes here (ExitMark)
}

// OOMUnknown is the reason of an exit 137 under a memory limit whose cause no one could tell:
// the engine did not say OOM and the kernel's OOM notification was not watched.
const OOMUnknown = "killed (SIGKILL) under a memory limit: whether for going over it is unknown (neither the engine nor the kernel's OOM notification could be read)"

// ExitMark is how far a reader of the exit stream has come: the cursor of the exits it took
// last, and which containers' exits it took at exactly that cursor. Two containers can exit in
// the same nanosecond (Docker's die times are the daemon's wall clock), so a stream resumed
// only after the cursor could skip the second for good — its container would stay RUNNING in
// the agent. Runtime.Exits therefore gives every exit at or after its cursor, and the reader
// drops the ones it already took there (Taken). The set is reset whenever the cursor moves on.
type ExitMark struct {
	Cursor int64
	taken  []string // ids of the containers whose exits at Cursor were taken
}

// Taken says whether x is an exit at the mark's cursor that the reader already took.
func (m *ExitMark) Taken(x Exit) bool {
	return x.Cursor == m.Cursor && slices.Contains(m.taken, x.ID)
}

// Take notes x as taken. An exit behind the mark (a stream gives none) leaves it as it is.
func (m *ExitMark) Take(x Exit) {
	switch {
	case x.Cursor > m.Cursor:
		m.Cursor, m.taken = x.Cursor, []string{x.ID}
	case x.Cursor == m.Cursor && !slices.Contains(m.taken, x.ID):
		m.taken = append(slices.Clip(m.taken), x.ID) // a copy of the mark keeps its own set
	}
}

// HealthChange is a container's health check reaching a verdict (protocol.md §4).
type HealthChange struct {
	ID        string
	Task      string
	Container string
	Health    event.Health // HealthHealthy or HealthUnhealthy
	At        time.Time
}
