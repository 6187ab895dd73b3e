package fsm

import (
	"time"

	"github.com/agentd/agentd/internal/event"
)

// Hooks for the package's external tests (fsm_test), compiled into tests only.

// NextUp is the task's steps on its way up, as decide.go reads them from the task table.
var NextUp = nextUp

// TombstoneOf is a tombstone without reasons or containers: cleaned at cleanedNs by record
// cleanSeq, its task's STOPPED at record stopSeq.
func TombstoneOf(cleanedNs int64, cleanSeq, stopSeq uint64) *Tombstone {
	return (*names)(nil).pack(tombstoneFields{CleanedNs: cleanedNs, CleanSeq: cleanSeq, StopSeq: stopSeq})
}

// PackedSize is the bytes a tombstone's packed part holds.
func PackedSize(ts *Tombstone) int { return len(ts.packed) }

// UnpackedTombstones are st's tombstones as a snapshot writes them.
func UnpackedTombstones(st *State) map[string]any {
	out := make(map[string]any, len(st.Tombstones))
	for arn, ts := range st.Tombstones {
		out[arn] = st.names.unpack(ts)
	}
	return out
}

// The core's decisions, reached from outside only through Node: its own tests call them here.

// Decide is decide.
func (s *State) Decide(now time.Time, cfg Config, arns ...string) Decisions {
	return s.decide(now, cfg, arns...)
}

// Gate is gate.
func (f InFlight) Gate(a Action) Hold { return f.gate(a) }

// Next is next.
func (q *RemovalQueue) Next(s *State, now time.Time, cfg Config, f InFlight) string {
	return q.next(s, now, cfg, f)
}

// PlanImageCycle is planImageCycle.
func (s *State) PlanImageCycle(now time.Time, cfg ImageConfig, c ImageCycle, out InFlight) ImagePlan {
	return s.planImageCycle(now, cfg, c, out)
}

// HeldExitAfter is heldExitAfter.
func (s *State) HeldExitAfter(r event.Record, x ContainerExited) HeldFate {
	return s.heldExitAfter(r, x)
}
