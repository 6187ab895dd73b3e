package submit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/protocol"
)

// A change the control plane keeps refusing must not hold up the others (DESIGN.md, "What
// must hold" 8). When a report of several changes is refused as a whole (400 malformed, 413 too
// large), nothing says which change is at fault, so the next reports carry half as many until
// one is refused alone: that one is held — retried alone, slowly, with its own growing wait —
// while the rest flow. A task's later changes wait behind its held one, so per-task order
// holds (PROTOCOL.md §3).

// isolation is the changes held and how many the next report may carry.
type isolation struct {
	limit int              // most changes the next report carries (halved by a refusal)
	held  map[string]*held // changes refused alone, by id
}

// held is a change refused alone.
type held struct {
	task  string
	since time.Time       // first refused alone
	until time.Time       // not sent again before this
	tries int             // refusals so far
	bo    *jitter.Backoff // its lone retries' waits: SlowRetry, doubling to MaxHeldWait
}

// MaxHeldWait is the longest a held change waits between its lone retries.
const MaxHeldWait = 10 * time.Minute

// envelope is the bytes of a report's body around its changes: {"changes":[…]}.
const envelope = len(`{"changes":[]}`)

// choose picks what the next report carries from candidates (oldest first): a held change that
// is due, alone; else, in order, up to isolation.limit changes of tasks with no held change
// before them, whose body stays within protocol.MaxRequestBody. It also forgets held changes
// that are no longer pending (settled, or carried by a later change of their subject). The zero
// time returned is when a held change is next due, when nothing could be chosen.
func (s *Submitter) choose(now time.Time, candidates []fsm.Change, complete bool) ([]protocol.StateChange, time.Time) {
	if complete && len(s.isolate.held) > 0 {
		present := make(map[string]bool, len(candidates))
		for _, c := range candidates {
			present[c.ID] = true
		}
		for id := range s.isolate.held {
			if !present[id] {
				delete(s.isolate.held, id)
			}
		}
	}
	blocked := map[string]bool{} // tasks whose earlier change is held and not due
	var wake time.Time
	for _, c := range candidates {
		h, ok := s.isolate.held[c.ID]
		if !ok {
			continue
		}
		if !now.Before(h.until) && !blocked[c.Task] {
			return []protocol.StateChange{wire(c)}, time.Time{}
		}
		blocked[c.Task] = true
		if wake.IsZero() || h.until.Before(wake) {
			wake = h.until
		}
	}
	var out []protocol.StateChange
	size := envelope
	for _, c := range candidates {
		if len(out) >= s.isolate.limit || (s.p.Naive && len(out) >= 1) {
			break
		}
		if blocked[c.Task] {
			continue
		}
		w := wire(c)
		b, _ := json.Marshal(w)
		if len(out) > 0 && size+len(b)+1 > protocol.MaxRequestBody {
			break
		}
		size += len(b) + 1
		out = append(out, w)
	}
	if len(out) > 0 {
		wake = time.Time{}
	}
	return out, wake
}

// refused handles a report refused as a whole (400 or 413): a report of several changes is
// split, a lone change is held. It returns the wait before the next report and what to log.
func (s *Submitter) refused(now time.Time, sent []protocol.StateChange, r protocol.ReportResult) (time.Duration, string) {
	if len(sent) > 1 {
		s.isolate.limit = max(1, len(sent)/2)
		// A quick retry: the control plane answered, it is not overloaded, and a bisection
		// of 100 changes takes seven reports.
		return s.p.Initial, ""
	}
	c := sent[0]
	h := s.isolate.held[c.ID]
	if h == nil {
		h = &held{task: c.TaskARN, since: now, bo: jitter.NewBackoff(s.p.SlowRetry, MaxHeldWait, s.rng)}
		s.isolate.held[c.ID] = h
	}
	h.tries++
	h.until = now.Add(h.bo.NextBackOff())
	msg := ""
	if h.tries == 1 {
		msg = "the control plane refuses change " + c.ID + " of task " + protocol.Quote(c.TaskARN) + " alone (" + string(r.Outcome) + ": " + errText(r.Err) +
			"); it is held and retried alone, slowly, while the other changes are reported"
	}
	return 0, msg
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// settledHeld forgets held changes the control plane has now settled, and lets reports grow
// again after a split.
func (s *Submitter) settledHeld(ids []string) {
	for _, id := range ids {
		delete(s.isolate.held, id)
	}
	s.isolate.limit = min(BatchSize, s.isolate.limit*2)
}

// want is how many pending changes a report is chosen from: a report's worth beyond the held
// ones, which may stand first and not be sendable.
func (s *Submitter) want() int { return BatchSize + len(s.isolate.held) }

// heldHealth names the held changes for /healthz: how many, and the oldest-held one's task.
func (s *Submitter) heldHealth() string {
	var first string
	var firstHeld *held
	for id, h := range s.isolate.held {
		if firstHeld == nil || h.since.Before(firstHeld.since) || (h.since.Equal(firstHeld.since) && id < first) {
			first, firstHeld = id, h
		}
	}
	return fmt.Sprintf("the control plane refuses %d state change(s) one by one (each held and retried alone, the others still reported); "+
		"first %s of task %s, refused since %s", len(s.isolate.held), first, protocol.Quote(firstHeld.task), firstHeld.since.Format(time.RFC3339))
}
