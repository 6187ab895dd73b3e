package forensics

import (
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// Replayed is the projection as the agent had it after record Seq.
type Replayed struct {
	State    *fsm.State
	Seq      uint64
	At       time.Time // the time of record Seq
	FromSnap uint64    // the snapshot replay started from (0: the beginning)
}

// Replay rebuilds the projection up to record toSeq (0: the end) by the daemon's own load
// path (engine.Load: the newest sound snapshot at or before it, then the records after it).
func Replay(j *journal.Journal, toSeq uint64) (Replayed, error) {
	if toSeq == 0 {
		_, last, err := j.Range()
		if err != nil {
			return Replayed{}, err
		}
		toSeq = last
	}
	l, err := engine.Load(j, toSeq)
	return Replayed{State: l.State, FromSnap: l.FromSnap, Seq: l.State.LastSeq, At: l.State.LastTime}, err
}

// ReplayAt rebuilds the projection as it was at a moment: after the last record at or before t.
func ReplayAt(j *journal.Journal, t time.Time) (Replayed, error) {
	seq, err := j.SeqAt(t)
	if err != nil {
		return Replayed{}, err
	}
	if seq == 0 {
		return Replayed{State: fsm.New()}, fmt.Errorf("--at %s: before the journal's first record", t.Format(time.RFC3339Nano))
	}
	return Replay(j, seq)
}
