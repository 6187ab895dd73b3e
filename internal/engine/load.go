package engine

import (
	"errors"
	"fmt"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// Loaded is a projection rebuilt from a journal.
type Loaded struct {
	State    *fsm.State
	FromSnap uint64  // the snapshot replay started from (0: the beginning)
	Replayed int     // records applied after it
	Skipped  []error // snapshots passed over (damaged, unreadable), newest first
}

// Load is the one way a projection is rebuilt from a journal — at recovery, after a failed
// commit, and for `agentd journal replay`: the newest sound snapshot at or before toSeq (0:
// the end), then the records after it, up to toSeq. A snapshot whose bytes are damaged or
// that the projection cannot restore is skipped for the one before it (noted in Skipped); a
// record the projection refuses stops the load with an error naming it, and the state so far
// is returned beside the error for the forensics tools.
func Load(j *journal.Journal, toSeq uint64) (Loaded, error) {
	if toSeq == 0 {
		toSeq = ^uint64(0)
	}
	l := Loaded{State: fsm.New()}
	for at := toSeq; ; {
		snap, skipped, err := j.SnapshotAtOrBefore(at)
		l.Skipped = append(l.Skipped, skipped...)
		if err != nil {
			return l, fmt.Errorf("engine: load %s: %w", j.Path(), err)
		}
		if snap == nil {
			break
		}
		st, err := fsm.Restore(snap.Data)
		if err == nil {
			l.State, l.FromSnap = st, snap.AtSeq
			break
		}
		l.Skipped = append(l.Skipped, fmt.Errorf("snapshot at %d: %w", snap.AtSeq, err))
		if snap.AtSeq <= 1 {
			break
		}
		at = snap.AtSeq - 1
	}
	err := j.IterateRange(l.State.LastSeq+1, toSeq, func(r event.Record) error {
		l.Replayed++
		return l.State.Apply(r)
	})
	var refused *fsm.ApplyError
	if errors.As(err, &refused) {
		return l, fmt.Errorf("engine: load %s: %w (run `agentd journal verify --file %s` for every problem in the file)", j.Path(), err, j.Path())
	}
	if err != nil {
		return l, fmt.Errorf("engine: load %s: %w", j.Path(), err)
	}
	return l, nil
}
