package model

// What the control plane was told and settled, and the cleanup that may follow: a settled id
// names a change an earlier record made (sent never ahead of known); per subject the settled
// statuses go forward (a later status settled first carries the earlier ones: one sent after
// it goes back); a task's STOPPED is settled only with or after its containers'; and only
// once the control plane settled the task's STOPPED does the journal say stopped-acked, start
// the cleanup, remove containers or leave the tombstone.

import (
	"strconv"
	"strings"

	"github.com/agentd/agentd/internal/event"
)

// changeSeq reads the record a change id names: "c-<seq>", or "c-<journal id>-<seq>" where
// the journal id must be this journal's. ok is false for an id this journal cannot have made.
func (m *Model) changeSeq(id string) (uint64, bool) {
	rest, found := strings.CutPrefix(id, "c-")
	if !found {
		return 0, false
	}
	jid, digits := "", rest
	if i := strings.LastIndexByte(rest, '-'); i >= 0 {
		jid, digits = rest[:i], rest[i+1:]
	}
	if jid != "" && m.journalID != "" && jid != m.journalID {
		return 0, false
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	return seq, err == nil
}

// sentChange is the change id names, checked to have been made before rec; nil (and no
// violation) for one in a stretch compaction cut.
func (m *Model) sentChange(rec event.Record, id string) *change {
	seq, ok := m.changeSeq(id)
	switch {
	case !ok:
		m.breaks(rec, RuleSentAhead, "change id %q names no change of this journal", id)
	case seq >= rec.Seq:
		m.breaks(rec, RuleSentAhead, "change %q is of record %d, not yet journaled", id, seq)
	case m.changes[seq] != nil:
		return m.changes[seq]
	case !m.cut(seq):
		m.breaks(rec, RuleSentAhead, "change %q names record %d, which made no change", id, seq)
	}
	return nil
}

func reportAttempted(m *Model, rec event.Record) {
	for _, id := range rec.Event.(*event.ReportAttempted).IDs {
		m.sentChange(rec, id)
	}
}

func changesSettled(m *Model, rec event.Record) {
	e := rec.Event.(*event.ChangesSettled)
	ids := append([]string(nil), e.Accepted...)
	for _, r := range e.Rejected {
		ids = append(ids, r.ID)
	}
	var stops []*change
	for _, id := range ids {
		ch := m.sentChange(rec, id)
		if ch == nil || ch.settled {
			continue // a retry's or a re-send's answer: settled before
		}
		ch.settled = true
		if ch.health {
			continue // health changes stand alone
		}
		seq, _ := m.changeSeq(id)
		if later := m.latest[ch.subject]; later > seq {
			m.breaks(rec, RuleSentBackwards, "%s of record %d settled after the later change of record %d", ch.status, seq, later)
			continue
		}
		m.latest[ch.subject] = seq
		if ch.container == "" && ch.status == event.StatusStopped {
			stops = append(stops, ch)
		}
	}
	// A task's STOPPED stands after its containers' STOPPED: settled before, or in this answer.
	for _, ch := range stops {
		t := m.tasks[ch.task]
		if t == nil {
			continue
		}
		for _, name := range t.names {
			c := t.containers[name]
			if cs := m.changes[c.stopSeq]; c.stopSeq == 0 || cs == nil || !cs.settled {
				m.breaks(rec, RuleTaskStoppedFirst, "task %s's STOPPED settled before container %s's", ch.task, name)
			}
		}
		t.settled = true
	}
}

// settledStop is the check at every door to cleanup: the control plane settled the task's
// STOPPED (not merely the agent saying so).
func (m *Model) settledStop(rec event.Record, t *task, what string) bool {
	if !t.settled {
		m.breaks(rec, RuleCleanupBeforeSettled, "%s, but the control plane never settled the task's STOPPED (record %d)", what, t.stopSeq)
		return false
	}
	return true
}

func stoppedAcked(m *Model, rec event.Record) {
	t := m.taskOf(rec)
	if t == nil || !m.settledStop(rec, t, "stopped-acked") {
		return
	}
	id := rec.Event.(*event.StoppedAcked).ChangeID
	if seq, ok := m.changeSeq(id); !ok || seq != t.stopSeq {
		m.breaks(rec, RuleSentAhead, "stopped-acked names change %q, not the task's STOPPED (record %d)", id, t.stopSeq)
	}
	t.acked = true
}

func cleanupStarted(m *Model, rec event.Record) {
	t := m.taskOf(rec)
	if t == nil || !m.settledStop(rec, t, "cleanup started") {
		return
	}
	if !t.acked {
		m.breaks(rec, RuleCleanupBeforeSettled, "cleanup started before stopped-acked was journaled")
	}
	t.cleaning = true
}

func containerRemoved(m *Model, rec event.Record) {
	if rec.Event.(*event.ContainerRemoved).Fence {
		fence(m, rec)
		return
	}
	t, c := m.containerOf(rec)
	if c == nil || !m.settledStop(rec, t, "container removed") {
		return
	}
	switch {
	case !t.cleaning:
		m.breaks(rec, RuleCleanupBeforeSettled, "container removed before its task's cleanup started")
	case c.known == event.StatusRunning || c.inFlight != "":
		m.breaks(rec, RuleStoppedWhileRunning, "container removed while %s (in flight: %q)", c.known, c.inFlight)
	}
}

// fence: a container removed before its task's STOPPED is settled — only one that never ran
// (CREATED, no start outcome), a start of it asked and none in flight, in a task not STOPPED:
// removed so that the start asked cannot land after its STOPPED. It never runs after — but
// one fenced to be made again (again=true, only in a task not on its way down) is a new
// container once created again, its starts counted afresh.
func fence(m *Model, rec event.Record) {
	t, c := m.containerOf(rec)
	again := rec.Event.(*event.ContainerRemoved).Again
	switch {
	case c == nil:
		return
	case t.cleaned:
		m.breaks(rec, RuleTaskTwice, "fence of a container of a cleaned task")
	case c.known != event.StatusCreated || c.starts > 0 || t.stopped():
		m.breaks(rec, RuleCleanupBeforeSettled, "fenced a container that is %s (start outcomes: %d) in a task STOPPED at record %d: it may have run", c.known, c.starts, t.stopSeq)
	case !c.asked:
		m.breaks(rec, RuleCleanupBeforeSettled, "fenced a container no start of which was asked")
	case c.inFlight != "":
		m.breaks(rec, RuleStoppedWhileRunning, "fenced a container while its %s is in flight", c.inFlight)
	case again && t.stopping != "":
		m.breaks(rec, RuleStatusOrder, "fenced to be made again in a task on its way down (%s)", t.stopping)
	}
	if again {
		c.again, c.asked = true, false // the next container: no start of it asked
		return
	}
	c.fenced = true
}

func taskCleaned(m *Model, rec event.Record) {
	t := m.taskOf(rec)
	if t == nil || !m.settledStop(rec, t, "task cleaned") {
		return
	}
	if !t.cleaning {
		m.breaks(rec, RuleCleanupBeforeSettled, "task cleaned before its cleanup started")
	}
	t.cleaned = true
}
