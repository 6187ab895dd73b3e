// Package fsm is agentd's pure core: it turns journal records into what the agent believes
// now — per task and per container the known status (what the runtime did), the desired status
// (what the control plane wants) and the sent status (what the control plane has settled) —
// maps every input from outside (a payload, a runtime call's outcome, an exit, a report's
// answer, what the runtime holds after a restart) to the records that say so (Step), and
// decides, given a "now" passed in, what should happen next (decide) and, given what is out
// (InFlight), which decided call may go now and which waits for what (gate, the removal
// queue, held exits, the image cycle: gate.go, runtime.go, images.go) — all of it reached
// through one door, Node (node.go), with Apply the load path's — and what a compaction may
// forget, given what the engine read of the journal file (PlanCompaction: compact.go).
//
// It promises:
//   - Purity: no I/O, no clock, no goroutines, no logging. Replay and live operation run the
//     same code, so replaying a journal rebuilds exactly the state the agent had.
//   - Every transition is checked against the looplab/fsm tables in machine.go; an illegal one
//     is an error naming the record, the task and the states, and changes nothing.
//   - CLEANING is reachable only from STOPPED_ACKED, and STOPPED_ACKED only through a
//     stopped-acked record: no decision ever cleans a task the control plane has not settled.
//   - Sent status never passes known status and never moves back; desired status only moves
//     forward; a task ARN, live or tombstoned, is never added twice.
//   - Snapshot encoding is deterministic: snapshot + tail replay equals full replay, byte for byte.
package fsm

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// Task is a live task: assigned and not yet cleaned.
type Task struct {
	ARN        string       `json:"arn"`
	Family     string       `json:"family,omitempty"`
	Version    string       `json:"version,omitempty"`
	Known      event.Status `json:"known"`
	Desired    event.Status `json:"desired"`
	Sent       event.Status `json:"sent"`
	Reason     string       `json:"reason,omitempty"`
	StopCause  string       `json:"stop_cause,omitempty"` // the first reason it began to stop
	Containers []*Container `json:"containers"`
	AddedSeq   uint64       `json:"added_seq"`
	// DesiredSeq: the last desired_changed after AddedSeq: a refused change older than it is
	// not offered again (refused.go). A re-send naming RUNNING does not count: desired status
	// only moves forward (PROTOCOL.md §1), so it retracts no stop.
	DesiredSeq uint64    `json:"desired_seq,omitempty"`
	AddedAt    time.Time `json:"added_at"`
	StoppedAt  time.Time `json:"stopped_at,omitzero"` // the journaled stop time: cleanup waits from here
	StopSeq    uint64    `json:"stop_seq,omitempty"`
	AckedAt    time.Time `json:"acked_at,omitzero"`
	CleaningAt time.Time `json:"cleaning_at,omitzero"`
	Rejected   bool      `json:"rejected,omitempty"` // broke a protocol rule: recorded STOPPED, never run
	Pending    []uint64  `json:"pending,omitempty"`  // unsettled task-level changes, by seq
	// Messages are the payloads that hold this task: while it is live their ids are kept, so
	// a re-send of one is recognised whole — also the tasks in it that are long forgotten.
	Messages []string `json:"messages,omitempty"`
	// Health is the worst verdict of its essential containers' health checks (none: "").
	Health event.Health `json:"health,omitempty"`
}

// heldBy notes a payload that holds the task.
func (t *Task) heldBy(message string) {
	if message != "" && !slices.Contains(t.Messages, message) {
		t.Messages = append(t.Messages, message)
	}
}

// Container is one container of a live task.
type Container struct {
	event.ContainerSpec
	Known       event.Status           `json:"known"`
	Sent        event.Status           `json:"sent"`
	ExitCode    *int                   `json:"exit_code,omitempty"`
	Reason      string                 `json:"reason,omitempty"`
	RuntimeID   string                 `json:"runtime_id,omitempty"`
	Removed     bool                   `json:"removed,omitempty"`
	RolledBack  bool                   `json:"rolled_back,omitempty"`      // the runtime lost it before it started once: created again, never twice
	Again       bool                   `json:"again,omitempty"`            // fenced while its task ran on: CREATED with no container until it is made again
	InFlight    ActionKind             `json:"in_flight,omitempty"`        // a call journaled as started whose outcome is not journaled yet
	StartsAsked int                    `json:"starts_asked,omitempty"`     // while CREATED, the starts asked (call_started): one may land late, so it is fenced before STOPPED
	Bindings    []event.NetworkBinding `json:"network_bindings,omitempty"` // host ports bound while it runs
	Health      event.Health           `json:"health,omitempty"`           // its health check's verdict while it runs
	ImageID     string                 `json:"image_id,omitempty"`         // the image its reference resolved to when pulled
	ImageDigest string                 `json:"image_digest,omitempty"`     // that image's content digest
	StoppedAt   time.Time              `json:"stopped_at,omitzero"`
	StopSeq     uint64                 `json:"stop_seq,omitempty"`
	Pending     []uint64               `json:"pending,omitempty"` // unsettled changes, by seq
}

// Tombstone is what outlives a cleaned task for the retention period, and no more than the
// guard needs (issue 25: it is kept for every task cleaned within the retention, 600,000 on a
// host that runs a short task a second): its ARN (the key it is kept under, not repeated in
// it), to recognise a re-send; when it was cleaned, for the retention; and its final STOPPED
// changes — each container's, then the task's — so they can be reported again under the very
// ids they were first reported with (PROTOCOL §1). The ids are not stored: a change's id
// derives from its record's sequence number (ChangeID). All but when it was cleaned is packed
// (tombstonepack.go: tombstoneFields unpacked): 32 bytes and a few dozen packed, not 144.
type Tombstone struct {
	CleanSeq  uint64 // the record that cleaned it
	CleanedNs int64  // when, Unix nanoseconds in UTC: its retention runs from here
	packed    string
}

// FinalStop is a container's final STOPPED change, kept in a tombstone.
type FinalStop struct {
	Container string `json:"c"`
	Reason    string `json:"reason,omitempty"`
	Seq       uint64 `json:"seq"`
	AtNs      int64  `json:"at_ns"`
	Exit      int64  `json:"exit,omitempty"`
	HasExit   bool   `json:"has_exit,omitempty"`
	// BareID: its id was made before the journal had an id ("c-<seq>", ChangeID): an
	// older snapshot's tombstone, its id kept as it was first reported.
	BareID bool `json:"bare_id,omitempty"`
}

// StoppedAt is when the task's STOPPED was journaled.
func (t *Tombstone) StoppedAt() time.Time { _, _, ns := t.packedStop(); return fromNs(ns) }

// StopSeq is the record of the task's STOPPED: its change's id.
func (t *Tombstone) StopSeq() uint64 { _, seq, _ := t.packedStop(); return seq }

// HistoryDropped says its records went before the retention ended, to keep the journal
// within --journal-max-bytes (event.CompactionDone.Early); the tombstone alone answers for it.
func (t *Tombstone) HistoryDropped() bool {
	flags, _, _ := t.packedStop()
	return flags&packedHistoryDropped != 0
}

// dropHistory marks its history dropped.
func (t *Tombstone) dropHistory() {
	if t.packed != "" && !t.HistoryDropped() {
		t.packed = string(t.packed[0]|packedHistoryDropped) + t.packed[1:]
	}
}

// CleanedAt is when the task was cleaned: its retention runs from here.
func (t *Tombstone) CleanedAt() time.Time { return fromNs(t.CleanedNs) }

// toNs is t in Unix nanoseconds; the zero time is 0 (its UnixNano is out of range).
func toNs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromNs undoes toNs, in UTC as every time in the projection is.
func fromNs(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// State is the projection.
type State struct {
	AgentID    string                `json:"agent_id,omitempty"`
	JournalID  string                `json:"journal_id,omitempty"`
	LastSeq    uint64                `json:"last_seq"`
	LastTime   time.Time             `json:"last_time,omitzero"`
	Starts     int                   `json:"starts"`
	Tasks      map[string]*Task      `json:"tasks"`
	Tombstones map[string]*Tombstone `json:"tombstones"`
	Messages   map[string]uint64     `json:"messages"`              // message id → seq of its payload_received
	Outbox     map[uint64]*Change    `json:"outbox"`                // unsettled changes by seq
	ExitCursor int64                 `json:"exit_cursor,omitempty"` // the runtime event stream's position, from journaled exits
	Images     map[string]*Image     `json:"images,omitempty"`      // images this agent pulled and has not removed, by id
	Refusals   []Refusal             `json:"refusals,omitempty"`    // payload records the projection refused, oldest first (refused.go)

	order      []uint64 // Outbox keys ascending, possibly with settled ones not yet swept
	names      *names   // reasons and container names tombstones share (tombstonepack.go)
	taskM      *machine
	containerM *machine
}

// New returns an empty projection.
func New() *State {
	return &State{
		Tasks:      map[string]*Task{},
		Tombstones: map[string]*Tombstone{},
		Messages:   map[string]uint64{},
		Outbox:     map[uint64]*Change{},
		Images:     map[string]*Image{},
		names:      &names{},
		taskM:      newTaskMachine(),
		containerM: newContainerMachine(),
	}
}

// Container returns the named container of the task, or nil.
func (t *Task) Container(name string) *Container {
	for _, c := range t.Containers {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Stopping reports whether the task is on its way down: the control plane wants it stopped,
// or an essential container has stopped.
func (t *Task) Stopping() bool {
	return t.StopCause != "" || t.Known.Rank() >= event.StatusStopped.Rank()
}

// SortedTasks returns the live tasks ordered by ARN.
func (s *State) SortedTasks() []*Task {
	out := make([]*Task, 0, len(s.Tasks))
	for _, t := range s.Tasks {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *Task) int { return strings.Compare(a.ARN, b.ARN) })
	return out
}

func (s *State) String() string {
	return fmt.Sprintf("projection at %d: %d tasks, %d tombstones, %d unsent", s.LastSeq, len(s.Tasks), len(s.Tombstones), len(s.Outbox))
}
