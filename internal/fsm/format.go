package fsm

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// Format renders the projection for people: every live task with its known / desired / sent
// status and containers, what each waiting container waits for (depends_on, derived at now),
// the tombstones, the payload records refused (refused.go) and the outbox. It is what `agentd journal replay` prints and what the
// projection's script tests compare against.
func (s *State) Format(now time.Time, cfg Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "at record %d", s.LastSeq)
	if !s.LastTime.IsZero() {
		fmt.Fprintf(&b, " (%s)", ts(s.LastTime))
	}
	fmt.Fprintf(&b, ": %d live, %d tombstoned, %d unsent\n", len(s.Tasks), len(s.Tombstones), len(s.Outbox))
	for _, t := range s.SortedTasks() {
		b.WriteString(s.FormatTask(t, now, cfg))
	}
	tombs := make([]string, 0, len(s.Tombstones))
	for arn := range s.Tombstones {
		tombs = append(tombs, arn)
	}
	slices.Sort(tombs)
	for _, arn := range tombs {
		t := s.Tombstones[arn]
		fmt.Fprintf(&b, "tombstone %s stopped=%s cleaned=%s", event.Printable(arn), ts(t.StoppedAt()), ts(t.CleanedAt()))
		if reason := s.TombstoneReason(t); reason != "" {
			fmt.Fprintf(&b, " reason=%q", reason)
		}
		b.WriteString("\n")
	}
	ids := make([]string, 0, len(s.Images))
	for id := range s.Images {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		img := s.Images[id]
		fmt.Fprintf(&b, "image %s refs=%s pulled=%s last_used=%s\n", event.Printable(id), event.Printable(strings.Join(img.Refs, ",")), ts(img.PulledAt), ts(img.LastUsed))
	}
	for _, r := range s.Refusals {
		fmt.Fprintf(&b, "refused at record %d (%s) %s", r.Seq, ts(r.At()), r.Record)
		if r.Task != "" {
			fmt.Fprintf(&b, " task %s", event.Printable(r.Task))
		}
		if r.Container != "" {
			fmt.Fprintf(&b, " container %s", event.Printable(r.Container))
		}
		fmt.Fprintf(&b, " message %s reason=%q", event.Printable(r.MessageID), r.Reason)
		if r.Desired != "" {
			fmt.Fprintf(&b, " desired=%s", r.Desired)
		}
		b.WriteByte('\n')
	}
	if out := s.Pending(len(s.Outbox)); len(out) > 0 {
		fmt.Fprintf(&b, "outbox (%d unsent, %d to send after coalescing):\n", len(s.Outbox), len(out))
		for _, c := range out {
			b.WriteString("  " + c.String() + "\n")
		}
	}
	return b.String()
}

// FormatTask renders one live task.
func (s *State) FormatTask(t *Task, now time.Time, cfg Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "task %s known=%s desired=%s sent=%s", event.Printable(t.ARN), t.Known, t.Desired, t.Sent)
	if t.Rejected {
		b.WriteString(" rejected")
	}
	if t.Health != "" {
		fmt.Fprintf(&b, " health=%s", t.Health)
	}
	if t.Reason != "" {
		fmt.Fprintf(&b, " reason=%q", t.Reason)
	}
	b.WriteString("\n")
	for _, c := range t.Containers {
		fmt.Fprintf(&b, "  %s known=%s sent=%s", c.Name, c.Known, c.Sent)
		if c.ExitCode != nil {
			fmt.Fprintf(&b, " exit=%d", *c.ExitCode)
		}
		if c.RuntimeID != "" {
			fmt.Fprintf(&b, " id=%s", c.RuntimeID)
		}
		if c.ImageDigest != "" {
			fmt.Fprintf(&b, " image=%s", event.Printable(c.ImageDigest))
		}
		if c.Health != "" {
			fmt.Fprintf(&b, " health=%s", c.Health)
		}
		if c.Removed {
			b.WriteString(" removed")
		}
		if c.Reason != "" {
			fmt.Fprintf(&b, " reason=%q", c.Reason)
		}
		if w, ok := t.Waiting(c, now); ok {
			fmt.Fprintf(&b, " %q", w.Reason(now))
		}
		b.WriteString("\n")
	}
	if !t.StoppedAt.IsZero() {
		fmt.Fprintf(&b, "  stopped=%s cleanup-due=%s", ts(t.StoppedAt), ts(t.CleanupDue(cfg)))
		if blocked := s.BlockedOnAck(t, now); blocked > 0 {
			fmt.Fprintf(&b, " blocked-on-ack=%s", blocked)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// BlockedOnAck is how long a stopped task has waited for the control plane to settle its
// STOPPED (zero once settled, or before it stopped).
func (s *State) BlockedOnAck(t *Task, now time.Time) time.Duration {
	if t.Known != "STOPPED" || t.StoppedAt.IsZero() || now.Before(t.StoppedAt) {
		return 0
	}
	return now.Sub(t.StoppedAt)
}

func (c Change) String() string {
	subj := c.Task
	if c.Container != "" {
		subj += "/" + c.Container
	}
	status := string(c.Status)
	if c.Health != "" {
		status = "health=" + string(c.Health)
	}
	s := fmt.Sprintf("%s %s %s", c.ID, event.Printable(subj), status)
	if c.ExitCode != nil {
		s += fmt.Sprintf(" exit=%d", *c.ExitCode)
	}
	if c.Reason != "" {
		s += fmt.Sprintf(" reason=%q", c.Reason)
	}
	return s
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}
