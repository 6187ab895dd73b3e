package fsm

import (
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// Refusals: what the projection remembers of the payload records it refused (DESIGN.md
// invariant 11). A refused record is never journaled, but its payload is acknowledged — the
// control plane would otherwise re-send it forever — so a record_refused is journaled in its
// place. It promises that such a task is named, not lost, across restarts, snapshots and
// compactions, until the retention ends:
//
//   - record_refused changes no task: every projection accepts it.
//   - Its message id counts as held, so the payload re-sent is acknowledged again and not
//     applied twice (PROTOCOL.md §2); a later payload with the task is decided afresh.
//   - A refused desired status change (a stop) is remembered with the status asked for: its
//     payload is held, so a re-send never brings it back, and a restart decides afresh from a
//     journal that never held it. After a restart it is offered to the core again (Reoffered),
//     once per restart, under the payload's rule (desiredMoves) — unless a newer change of
//     its desired status was journaled since (Task.DesiredSeq). A newer re-send naming
//     RUNNING does not retract it: desired status only moves forward.
//   - The refusals are kept newest last, at most MaxRefusals of them, so a core that loops
//     on a bug cannot grow the projection without bound; a compaction forgets those past the
//     retention with their records (CompactionPlan.RefusedUpTo).

// MaxRefusals bounds the refusals the projection keeps: the newest.
const MaxRefusals = 1000

// Refusal is one payload record the projection refused, as its record_refused says.
type Refusal struct {
	Seq       uint64 `json:"seq"` // the record_refused
	AtNs      int64  `json:"at_ns"`
	Task      string `json:"task,omitempty"`
	Container string `json:"container,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	Record    string `json:"record"` // the refused record's type
	Reason    string `json:"reason"`
	// Desired is the status a refused desired_changed asked for ("" for other records).
	Desired event.Status `json:"desired,omitempty"`
}

// At is when the refusal was journaled: its retention runs from here.
func (r Refusal) At() time.Time { return fromNs(r.AtNs) }

// refused applies a record_refused.
func (s *State) refused(rec event.Record, e *event.RecordRefused) {
	if _, held := s.Messages[e.MessageID]; e.MessageID != "" && !held {
		s.Messages[e.MessageID] = rec.Seq // its payload_received was refused too, or went with it
	}
	s.Refusals = append(s.Refusals, Refusal{Seq: rec.Seq, AtNs: toNs(rec.Time), Task: rec.Task, Container: rec.Container,
		MessageID: e.MessageID, Record: e.Record, Reason: e.Reason, Desired: e.Desired})
	if n := len(s.Refusals) - MaxRefusals; n > 0 {
		s.Refusals = append(s.Refusals[:0:0], s.Refusals[n:]...) // a fresh array: the old one's head goes
	}
}

// forgetRefusals drops the refusals at or before seq (a compaction_done's RefusedUpTo).
func (s *State) forgetRefusals(seq uint64) {
	i := 0
	for i < len(s.Refusals) && s.Refusals[i].Seq <= seq {
		i++
	}
	if i > 0 {
		s.Refusals = append(s.Refusals[:0:0], s.Refusals[i:]...)
	}
	if len(s.Refusals) == 0 {
		s.Refusals = nil // the snapshot of a projection that forgot them all is one that never had any
	}
}

// refusedUpTo is the newest refusal past the retention (before horizon, at or before cut),
// so a compaction forgets it and those before it.
func (s *State) refusedUpTo(horizon time.Time, cut uint64) uint64 {
	var upTo uint64
	for _, r := range s.Refusals {
		if r.Seq > cut || !r.At().Before(horizon) {
			break // newest last: the rest are younger
		}
		upTo = r.Seq
	}
	return upTo
}

// checkRefusals is Restore's check of a snapshot's refusals: ascending, within the snapshot.
func (s *State) checkRefusals() error {
	if len(s.Refusals) > MaxRefusals {
		return fmt.Errorf("%d refusals, more than %d", len(s.Refusals), MaxRefusals)
	}
	var last uint64
	for _, r := range s.Refusals {
		if r.Seq <= last || r.Seq > s.LastSeq {
			return fmt.Errorf("refusal at record %d is damaged", r.Seq)
		}
		last = r.Seq
	}
	return nil
}

// Reoffered is a restart's offer of the refused desired status changes the projection
// remembers to the core again, as fresh decisions on the restored projection.
type Reoffered struct{}

// reoffer is the desired_changed records a restart offers again: for each task, its newest
// refusal that asked a desired status, when the task is live and was when refused (added
// before it), no record since stated its desired status (a newer message wins), and the
// payload's rule moves the desired status there (not already at or past it). Each carries
// its payload's message id, like the change refused.
func (s *State) reoffer() []event.Record {
	newest := map[string]uint64{}
	for _, r := range s.Refusals {
		if r.Desired != "" && r.Task != "" {
			newest[r.Task] = r.Seq
		}
	}
	var recs []event.Record
	for _, r := range s.Refusals {
		if r.Desired == "" || r.Task == "" || newest[r.Task] != r.Seq {
			continue
		}
		t := s.Tasks[r.Task]
		if t == nil || t.AddedSeq >= r.Seq || t.DesiredSeq >= r.Seq || !desiredMoves(t.Desired, r.Desired) {
			continue
		}
		recs = append(recs, event.Record{Task: r.Task, Event: &event.DesiredChanged{MessageID: r.MessageID, To: r.Desired}})
	}
	return recs
}
