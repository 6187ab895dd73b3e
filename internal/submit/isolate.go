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
// is due, alone; else, in order, up to s.limit changes of tasks with no held change before them,
// whose body stays within protocol.MaxRequestBody. It also forgets held changes that are no
// longer pending (settled, or carried by a later change of their subject). The zero time
// returned is when a held change is next due, when nothing could be chosen.
func (s *Submitter) choose(now time.Time, candidates []fsm.Change, complete bool) ([]protocol.StateChange, time.Time) {
	if complete && len(s.held) > 0 {
		present := make(map[string]bool, len(candidates))
		for _, c := range candidates {
			present[c.ID] = true
		}
		for id := range s.held {
			if !present[id] {
				delete(s.held, id)
			}
		}
	}
	blocked := map[string]bool{} // tasks whose earlier change is held and not due
	var wake time.Time
	for _, c := range candidates {
		h, ok := s.held[c.ID]
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
		if len(out) >= s.limit || (s.p.Naive && len(out) >= 1) {
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

// wire is a change's form on the wire, its reason within protocol.MaxReasonBytes.
func wire(c fsm.Change) protocol.StateChange {
	return protocol.StateChange{ID: c.ID, TaskARN: c.Task, Container: c.Container, Status: string(c.Status),
		ExitCode: c.ExitCode, Reason: protocol.ShortenReason(c.Reason), At: c.At, NetworkBindings: c.NetworkBindings, Health: string(c.Health)}
}

// refused handles a report refused as a whole (400 or 413): a report of several changes is
// split, a lone change is held. It returns the wait before the next report and what to log.
func (s *Submitter) refused(now time.Time, sent []protocol.StateChange, r protocol.ReportResult) (time.Duration, string) {
	if len(sent) > 1 {
		s.limit = max(1, len(sent)/2)
		// A quick retry: the control plane answered, it is not overloaded, and a bisection
		// of 100 changes takes seven reports.
		return s.p.Initial, ""
	}
	c := sent[0]
	h := s.held[c.ID]
	if h == nil {
		h = &held{task: c.TaskARN, since: now, bo: jitter.NewBackoff(s.p.SlowRetry, MaxHeldWait, s.rng)}
		s.held[c.ID] = h
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
		delete(s.held, id)
	}
	s.limit = min(BatchSize, s.limit*2)
}

// Want is how many pending changes the engine should offer Begin: a report's worth beyond the
// held ones, which may stand first and not be sendable.
func (s *Submitter) Want() int { return BatchSize + len(s.held) }

// heldHealth names the held changes for /healthz: how many, and the oldest-held one's task.
func (s *Submitter) heldHealth() string {
	var first string
	var firstHeld *held
	for id, h := range s.held {
		if firstHeld == nil || h.since.Before(firstHeld.since) || (h.since.Equal(firstHeld.since) && id < first) {
			first, firstHeld = id, h
		}
	}
	return fmt.Sprintf("the control plane refuses %d state change(s) one by one (each held and retried alone, the others still reported); "+
		"first %s of task %s, refused since %s", len(s.held), first, protocol.Quote(firstHeld.task), firstHeld.since.Format(time.RFC3339))
}
