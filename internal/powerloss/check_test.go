package powerloss

// The checks every crash state must pass, whatever built it.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/otlpship"
	"github.com/agentd/agentd/internal/seal"
)

// outcome is how a crash state's journal opened.
type outcome int

const (
	opened  outcome = iota
	refused         // by an error naming the file and the damage
	absent          // no journal file, and nothing acknowledged had needed one
)

// checkState opens the journal in dataDir as the agent would after the power came back, and
// returns how it opened and every broken promise, given that the cut came after op cut.
func checkState(dataDir string, r *run, cut int) (outcome, string, []string) {
	acked := r.acks[:r.ackedBy(cut)]
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	var journalID, sealKey, position string
	var last uint64 // the last acknowledged record
	for _, a := range acked {
		switch {
		case a.Journal != "":
			journalID = a.Journal
		case a.SealKey != "":
			sealKey = a.SealKey
		case a.Position != "":
			position = a.Position
		default:
			last = a.First + uint64(len(a.Types)) - 1
		}
	}
	path := filepath.Join(dataDir, journal.FileName)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if journalID != "" && (last > 0 || sealKey != "") {
			fail("%s is gone: the agent would start a new journal, losing records 1..%d it had acknowledged", path, last)
		}
		checkSealKey(dataDir, "", sealKey, fail)
		return absent, "", bad
	}
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		if !strings.Contains(err.Error(), path) || !errors.Is(err, journal.ErrDamaged) {
			fail("refused without naming the file and the damage: %v", err)
		}
		return refused, err.Error(), bad
	}
	defer j.Close()
	if journalID != "" && last > 0 && j.ID() != journalID {
		fail("journal id %s, not the run's %s: a silent fresh journal", j.ID(), journalID)
	}
	if id, _ := j.Meta("agent_id"); last > 0 && id != agentID {
		fail("agent id %q after the cut, want %q", id, agentID)
	}
	// Every acknowledged record is there with its sequence number (or compaction removed it,
	// which a recorded cut says).
	present := map[uint64]event.Record{}
	if err := j.Iterate(1, func(rec event.Record) error { present[rec.Seq] = rec; return nil }); err != nil {
		fail("reading the records: %v", err)
	}
	holes := j.Holes()
	cutAway := func(seq uint64) bool {
		for _, h := range holes {
			if h[0] <= seq && seq <= h[1] {
				return true
			}
		}
		return false
	}
	lost := 0
	for _, a := range acked {
		for i, typ := range a.Types {
			seq := a.First + uint64(i)
			rec, ok := present[seq]
			switch {
			case !ok && !cutAway(seq):
				if lost++; lost <= 3 {
					fail("acknowledged record %d (%s of %s) is lost", seq, typ, a.Tasks[i])
				}
			case ok && (rec.Event.Type() != typ || rec.Task != a.Tasks[i]):
				fail("record %d is %s of %s, but %s of %s was acknowledged with that number", seq, rec.Event.Type(), rec.Task, typ, a.Tasks[i])
			}
		}
	}
	if lost > 3 {
		fail("... %d acknowledged records lost in all", lost)
	}
	if rep, err := forensics.Verify(j); err != nil {
		fail("journal verify: %v", err)
	} else {
		for i, f := range rep.Findings {
			if i == 3 {
				fail("... %d findings in all", len(rep.Findings))
				break
			}
			fail("journal verify: record %d %s: %s: %s", f.Seq, f.Task, f.Kind, f.Detail)
		}
	}
	// The shipping position is one that was saved, and not older than the last acknowledged.
	if pos, err := j.Meta(otlpship.PositionKey); err != nil {
		fail("shipping position: %v", err)
	} else if !savedPosition(r, pos, position) {
		fail("shipping position %q after the cut: not a saved one at least as new as %q", pos, position)
	}
	sealedUnder, _ := j.Meta(seal.MetaKeyID)
	checkSealKey(dataDir, sealedUnder, sealKey, fail)
	return opened, "", bad
}

func savedPosition(r *run, got, atLeast string) bool {
	if got == atLeast {
		return true
	}
	reached := atLeast == ""
	for _, a := range r.acks {
		if a.Position == "" {
			continue
		}
		if a.Position == atLeast {
			reached = true
		}
		if reached && a.Position == got {
			return true
		}
	}
	return false
}

// ackedBy counts the acknowledgements that came before a cut after op cut.
func (r *run) ackedBy(cut int) int {
	n := 0
	for n < len(r.acks) && r.acks[n].LogLen <= cut+1 {
		n++
	}
	return n
}

// checkSealKey fails unless the seal key file is whole and the one the journal's values are
// sealed under (sealedUnder) and the one set up before the cut (setUp) — or, when neither
// exists, absent: the agent makes one.
func checkSealKey(dataDir, sealedUnder, setUp string, fail func(string, ...any)) {
	key, err := seal.LoadKey(filepath.Join(dataDir, seal.KeyFileName))
	switch {
	case errors.Is(err, seal.ErrNoKey) && sealedUnder == "" && setUp == "":
	case err != nil:
		fail("seal key: %v (the journal is sealed under %q; set up before the cut: %q)", err, sealedUnder, setUp)
	case sealedUnder != "" && key.ID() != sealedUnder:
		fail("seal key %s, but the journal is sealed under %s", key.ID(), sealedUnder)
	case setUp != "" && key.ID() != setUp:
		fail("seal key %s after the cut, but %s was set up before it", key.ID(), setUp)
	}
}
