package forensics

import (
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/event"
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

// Replay rebuilds the projection up to record toSeq (0: the end), from the newest snapshot
// at or before it, with the daemon's own projection code.
func Replay(j *journal.Journal, toSeq uint64) (Replayed, error) {
	if toSeq == 0 {
		_, last, err := j.Range()
		if err != nil {
			return Replayed{}, err
		}
		toSeq = last
	}
	st := fsm.New()
	from := uint64(1)
	var snapAt uint64
	snap, _, err := j.SnapshotAtOrBefore(toSeq)
	if err != nil {
		return Replayed{}, err
	}
	if snap != nil {
		if restored, err := fsm.Restore(snap.Data); err == nil {
			st, from, snapAt = restored, snap.AtSeq+1, snap.AtSeq
		}
	}
	r := Replayed{State: st, FromSnap: snapAt, Seq: st.LastSeq, At: st.LastTime}
	err = j.IterateRange(from, toSeq, func(rec event.Record) error {
		if err := st.Apply(rec); err != nil {
			return fmt.Errorf("replay stops: %w (run `agentd journal verify` for every problem)", err)
		}
		return nil
	})
	r.Seq, r.At = st.LastSeq, st.LastTime
	return r, err
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
