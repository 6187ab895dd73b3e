package fsm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// The outbox: every reportable transition becomes a change with an id derived from its
// record's sequence number, kept until the control plane settles it. It promises that ids are
// the same on every retry and restart, that per subject only the newest unsettled change needs
// sending (earlier ones are settled with it), and that a task's STOPPED stands after its
// containers' STOPPED, because it is caused only once they all stopped.

// Change is one state change for the control plane (PROTOCOL.md §3). Its id derives from the
// sequence number of the record that caused it, so it is the same on every retry and restart.
type Change struct {
	ID        string       `json:"id"`
	Seq       uint64       `json:"seq"`
	Task      string       `json:"task_arn"`
	Container string       `json:"container,omitempty"`
	Status    event.Status `json:"status"`
	ExitCode  *int         `json:"exit_code,omitempty"`
	Reason    string       `json:"reason,omitempty"`
	At        time.Time    `json:"at"`
	// NetworkBindings go with a container's RUNNING (PROTOCOL.md §4).
	NetworkBindings []event.NetworkBinding `json:"network_bindings,omitempty"`
	// Health, on a health change, stands instead of a status. Health changes stand alone:
	// they neither carry nor are carried by the subject's status changes.
	Health event.Health `json:"health,omitempty"`
}

// ChangeID is the id of the change caused by record seq.
func (s *State) ChangeID(seq uint64) string {
	if s.JournalID == "" {
		return "c-" + strconv.FormatUint(seq, 10)
	}
	return "c-" + s.JournalID + "-" + strconv.FormatUint(seq, 10)
}

// ChangeSeq reads the sequence number of the record that caused a change out of its id: the
// digits after the last dash. It does not depend on the journal id, so ids made before the
// first agent_started (or by an older build) still resolve; callers compare the whole id.
func ChangeSeq(id string) (uint64, bool) {
	if !strings.HasPrefix(id, "c-") {
		return 0, false
	}
	n, err := strconv.ParseUint(id[strings.LastIndexByte(id, '-')+1:], 10, 64)
	return n, err == nil
}

// Pending returns up to max changes to send next, in the order they happened, with earlier
// changes of a subject coalesced into its latest one (PROTOCOL.md §3). A task's STOPPED is
// caused only after all its containers stopped, so its containers' STOPPED changes come first.
func (s *State) Pending(max int) []Change {
	s.sweep()
	var out []Change
	for _, seq := range s.order {
		if len(out) >= max {
			break
		}
		c := s.Outbox[seq]
		if latest, ok := s.latestPending(c); ok && latest != seq {
			continue // a later change of the same subject carries this one
		}
		out = append(out, *c)
	}
	return out
}

// latestPending is the newest unsettled change of c's subject (false for a tombstone's re-sent
// final changes, which stand alone).
func (s *State) latestPending(c *Change) (uint64, bool) {
	t := s.Tasks[c.Task]
	if t == nil || c.Health != "" {
		return 0, false
	}
	p := t.Pending
	if c.Container != "" {
		ct := t.Container(c.Container)
		if ct == nil {
			return 0, false
		}
		p = ct.Pending
	}
	if len(p) == 0 {
		return 0, false
	}
	return p[len(p)-1], true
}

// OutboxLen is the number of unsettled changes.
func (s *State) OutboxLen() int { return len(s.Outbox) }

// OldestUnsent is the time of the oldest unsettled change (zero when none).
func (s *State) OldestUnsent() time.Time {
	s.sweep()
	if len(s.order) == 0 {
		return time.Time{}
	}
	return s.Outbox[s.order[0]].At
}

// sweep drops settled seqs from the order.
func (s *State) sweep() {
	if len(s.order) == len(s.Outbox) {
		return
	}
	s.order = slices.DeleteFunc(s.order, func(seq uint64) bool { _, ok := s.Outbox[seq]; return !ok })
}

func (s *State) addChange(rec event.Record, t *Task, c *Container, status event.Status, exit *int, reason string) {
	if !status.Reportable() {
		return
	}
	ch := &Change{ID: s.ChangeID(rec.Seq), Seq: rec.Seq, Task: t.ARN, Status: status, ExitCode: exit, Reason: reason, At: rec.Time}
	if c != nil {
		ch.Container = c.Name
		c.Pending = append(c.Pending, rec.Seq)
	} else {
		t.Pending = append(t.Pending, rec.Seq)
	}
	s.Outbox[rec.Seq] = ch
	s.order = append(s.order, rec.Seq)
}

// finalChanges are a stopped task's last changes — each container's STOPPED, then the task's —
// under the ids they were first reported with.
func finalChanges(s *State, t *Task) []Change {
	var out []Change
	for _, c := range t.Containers {
		if c.StopSeq != 0 {
			out = append(out, Change{ID: s.ChangeID(c.StopSeq), Seq: c.StopSeq, Task: t.ARN, Container: c.Name,
				Status: event.StatusStopped, ExitCode: c.ExitCode, Reason: c.Reason, At: c.StoppedAt})
		}
	}
	return append(out, Change{ID: s.ChangeID(t.StopSeq), Seq: t.StopSeq, Task: t.ARN, Status: event.StatusStopped, Reason: t.Reason, At: t.StoppedAt})
}

// requeue puts settled changes back in the outbox, under their own ids, for a control plane
// that lost track of them; the ones still queued stay as they are.
func (s *State) requeue(changes []Change) {
	for i := range changes {
		c := changes[i]
		if _, queued := s.Outbox[c.Seq]; !queued {
			s.Outbox[c.Seq] = &c
			s.insertOrder(c.Seq)
		}
	}
}

// addHealthChange queues a health change of a container (c non-nil) or task.
func (s *State) addHealthChange(rec event.Record, t *Task, c *Container, h event.Health) {
	ch := &Change{ID: s.ChangeID(rec.Seq), Seq: rec.Seq, Task: t.ARN, Health: h, At: rec.Time}
	if c != nil {
		ch.Container = c.Name
	}
	s.Outbox[rec.Seq] = ch
	s.order = append(s.order, rec.Seq)
}

func (s *State) insertOrder(seq uint64) {
	s.sweep()
	i, found := slices.BinarySearch(s.order, seq)
	if !found {
		s.order = slices.Insert(s.order, i, seq)
	}
}

// settle applies the control plane's answer. Every id is checked before anything changes.
func (s *State) settle(rec event.Record, e *event.ChangesSettled) error {
	ids := append([]string(nil), e.Accepted...)
	for _, r := range e.Rejected {
		ids = append(ids, r.ID)
	}
	var found []*Change
	for _, id := range ids {
		seq, ok := ChangeSeq(id)
		if !ok || seq >= rec.Seq {
			return fmt.Errorf("%w: %q", ErrSentAhead, id)
		}
		if c, ok := s.Outbox[seq]; ok && c.ID == id {
			found = append(found, c)
		}
		// Otherwise settled before (a retry's answer) or coalesced: nothing to do.
	}
	for _, c := range found {
		if _, still := s.Outbox[c.Seq]; !still {
			continue
		}
		t := s.Tasks[c.Task]
		if t == nil || c.Health != "" {
			delete(s.Outbox, c.Seq) // a tombstone's final change, re-sent; or a health change, alone
			continue
		}
		pending, sent := &t.Pending, &t.Sent
		if c.Container != "" {
			if ct := t.Container(c.Container); ct != nil {
				pending, sent = &ct.Pending, &ct.Sent
			}
		}
		// Earlier changes of the same subject are settled with it (coalescing).
		keep := (*pending)[:0]
		for _, seq := range *pending {
			if seq <= c.Seq {
				delete(s.Outbox, seq)
			} else {
				keep = append(keep, seq)
			}
		}
		*pending = keep
		delete(s.Outbox, c.Seq)
		if c.Status.Rank() > sent.Rank() {
			*sent = c.Status
		}
	}
	return nil
}

// settledByTask splits the control plane's answer into one changes_settled record per task,
// in the order the tasks' changes were sent, plus the folded report_attempted record: each
// task's settlements belong to its history (dump --task, timeline) and go with it at
// compaction, so the history kept is always whole.
func settledByTask(in ReportAnswered) []event.Record {
	var recs []event.Record
	if s := in.Settled; s != nil {
		taskOf := make(map[string]string, len(in.Sent))
		for _, c := range in.Sent {
			if _, seen := taskOf[c.ID]; !seen {
				taskOf[c.ID] = c.TaskARN
			}
		}
		per := map[string]*event.ChangesSettled{}
		var order []string
		get := func(task string) *event.ChangesSettled {
			if per[task] == nil {
				per[task] = &event.ChangesSettled{}
				order = append(order, task)
			}
			return per[task]
		}
		for _, id := range s.Accepted {
			p := get(taskOf[id])
			p.Accepted = append(p.Accepted, id)
		}
		for _, r := range s.Rejected {
			p := get(taskOf[r.ID])
			p.Rejected = append(p.Rejected, r)
		}
		for _, task := range order {
			recs = append(recs, event.Record{Task: task, Event: per[task]})
		}
	}
	if in.Attempt != nil {
		recs = append(recs, event.Record{Event: in.Attempt})
	}
	return recs
}
