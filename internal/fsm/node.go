package fsm

import (
	"fmt"
	"slices"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// Node is the core as one door, in etcd-io/raft's RawNode shape: every input goes in through
// Step, and what the inputs come to comes out as a Ready — an instruction the caller carries
// out, then acknowledges with the Advance input. The node owns every piece of state its
// decisions read: the projection, the calls out and the removal queue (nodecalls.go), the
// tasks to decide again (dirty), held exits (nodeexits.go), the quarantine (nodequarantine.go),
// the image cycle's memory (nodeimages.go) and the reconcile gate (nodereconcile.go). The
// caller keeps time (it hands in now, and the deadlines it was asked for as a Tick), I/O and
// every goroutine. It protects:
//   - every record is numbered, applied at once (so the next input and decision see it) and
//     handed out to journal in Ready.Records, or refused and dropped (quarantine);
//   - an action is in Ready.Actions only once the Gate let it go and its intent is among the
//     records before it: the caller journals the records, then makes the calls;
//   - nothing in a Ready counts as done before Advance says so: a call is out, a question
//     asked, only once the caller said the Ready's commit returned and what it released.
//
// Apply (the projection's) stays the load path's only other door: a journal is folded into a
// State, and NewNode takes it.
type Node struct {
	st  *State
	cfg NodeConfig
	rd  Ready // being made since the last Advance

	calls      callBook
	dirty      map[string]bool      // tasks touched since the last decision
	wakes      map[string]time.Time // the last wake handed out per task, so one is handed out once
	exits      exitBook
	quarantine quarantine
	images     imageMemory
	recon      reconGate
	compacting bool // a compaction the node planned runs: one at a time
}

// NodeConfig is what the node's decisions depend on besides the journal. Not journaled.
type NodeConfig struct {
	Config
	// RemovalSlots is how many container removals may be out at once (0: no bound).
	RemovalSlots int
	// Images is image collection: cycles every ImageInterval (0: none), the first after
	// ImageFirst.
	Images        ImageConfig
	ImageInterval time.Duration
	ImageFirst    time.Duration
	// Compaction is what a compaction after a snapshot may drop (retention < 0 and no budget:
	// none).
	Compaction CompactionPolicy
}

// Ready is what the inputs since the last Advance came to, as an instruction: journal
// Records in one commit, then — only once it returned — carry out the rest, then Step an
// Advance saying what became of it. Nothing in it has happened yet.
type Ready struct {
	Records []event.Record // to journal, in this order, numbered
	Acks    []string       // payloads (message ids) whose records are among Records: answer them
	Actions []Action       // runtime calls the Gate let go; their intents are among Records
	// Wakes are deadlines to keep: decide a task again at At (cleanups: At is the cleanup
	// deadline, to which the caller may add jitter).
	Wakes []Wake
	// Retries are the calls whose outcome asks for them again after a backoff: the caller
	// chooses the wait and Steps a RetryAt.
	Retries []Retry
	// Reconcile asks the runtime what it holds (non-nil: ask), with these containers probed
	// beyond its list; ImageSpace asks how full its disk is, for a collection cycle.
	Reconcile  []Probe
	ImageSpace bool
	// Compact is the compaction a committed snapshot allows (SnapshotCommitted): run it when
	// it is not Empty; its OverBudget says whether the journal is past its budget either way.
	Compact *CompactionPlan
	// Dropped are records the projection refused: a bug in the core, never journaled; their
	// tasks are quarantined. Notes are facts for the caller's logs and metrics.
	Dropped []Dropped
	Notes   []Note
}

// Retry is a call that failed in a way that asks for it again, and why.
type Retry struct {
	Key   ActionKey
	Cause string
}

// Probe is a container reconcile must ask about beyond the runtime's list: one created but
// never journaled (found by name, ID ""), or one known by id (gone, or just not listed).
type Probe struct {
	Task, Container, ID string
}

// Tick is time passing: the deadlines the caller keeps that have come, then the node decides
// every task the inputs or time touched. A caller ends each round of inputs with one.
type Tick struct {
	Due []string // tasks whose Wakes have come
	// AskRuntime: the wait before asking an unanswering runtime again is over.
	AskRuntime bool
	// JournalOpen: the wait after a refused commit is over; the exits it refused go in again.
	JournalOpen bool
}

// Advance says what became of the last Ready. Err: its commit failed — nothing was released,
// and Reload is the projection loaded from the journal again. Otherwise every effect was
// released but the actions in Withheld (they count as never made: their tasks are decided
// again).
type Advance struct {
	Err      error
	Reload   *State
	Withheld []ActionKey
}

// RetryAt is when a call in Ready.Retries may go again (the caller's backoff).
type RetryAt struct {
	Key ActionKey
	At  time.Time
}

// SnapshotCommitted: a snapshot's commit returned, and Facts is what the journal holds now.
// The node plans the compaction it allows (Ready.Compact) unless one runs; CompactionFinished
// ends the one that runs.
type SnapshotCommitted struct {
	Facts JournalFacts
}

// ImageSpace is the runtime's disk, answering Ready.ImageSpace.
type ImageSpace struct {
	Free, Total uint64
	Err         string // the question failed: collected by age only
}

// RuntimeUnanswered: the runtime did not say what it holds (at a start, or asked again). No
// runtime call is made until a RuntimeObserved comes.
type RuntimeUnanswered struct{ Err string }

// OwnRecord is a record of the agent's own life the caller writes (agent_started,
// agent_stopped, snapshot_taken): numbered and applied like the core's.
type OwnRecord struct{ Event event.Event }

// Forced is a verdict and actions as if the core had made them, for tests: the engine's hand
// in what the core would not decide, to prove the node's guards (quarantine, the Gate) hold;
// the property test hands in the control plane's facts without a payload's encoding.
type Forced struct {
	MessageID string // the payload the verdict answers ("": none)
	Verdict   Verdict
	Actions   []Action
}

func (Tick) isInput()              {}
func (SnapshotCommitted) isInput() {}
func (Advance) isInput()           {}
func (RetryAt) isInput()           {}
func (ImageSpace) isInput()        {}
func (RuntimeUnanswered) isInput() {}
func (OwnRecord) isInput()         {}
func (Forced) isInput()            {}

// NewNode is a node over a projection loaded from the journal (Apply): every task is decided
// at the first Tick.
func NewNode(st *State, cfg NodeConfig) *Node {
	n := &Node{st: st, cfg: cfg, dirty: map[string]bool{}, wakes: map[string]time.Time{},
		calls: newCallBook(cfg.RemovalSlots), exits: newExitBook(), images: newImageMemory()}
	n.calls.fresh()
	n.markAll()
	return n
}

// State is the projection, read-only for the caller.
func (n *Node) State() *State { return n.st }

// HasReady reports whether the last inputs left anything to journal or carry out.
func (n *Node) HasReady() bool {
	r := &n.rd
	return len(r.Records) > 0 || len(r.Acks) > 0 || len(r.Actions) > 0 || len(r.Wakes) > 0 ||
		len(r.Retries) > 0 || r.Reconcile != nil || r.ImageSpace || r.Compact != nil || len(r.Dropped) > 0 || len(r.Notes) > 0
}

// Ready is the instruction the inputs since the last Advance came to. Taking it changes
// nothing: the node goes on from it at Advance.
func (n *Node) Ready() Ready { return n.rd }

// Step hands the node one input at now. It returns an error only for an input it cannot
// read; a record the projection refuses is no error (Ready.Dropped).
func (n *Node) Step(now time.Time, in Input) error {
	switch in := in.(type) {
	case Tick:
		n.tick(now, in)
	case Advance:
		n.advance(in)
	case PayloadArrived:
		n.payload(now, in.MessageID, n.st.Step(now, in))
	case ActionFinished:
		n.actionFinished(now, in)
	case RetryAt:
		n.calls.retryAt(in.Key, in.At)
	case ContainerExited:
		n.exit(now, in)
	case CompactionFinished:
		n.compacting = false
		n.record(now, n.st.Step(now, in).Records...)
	case SnapshotCommitted:
		n.planCompaction(now, in.Facts)
	case HealthObserved, Reoffered:
		n.record(now, n.st.Step(now, in).Records...)
	case ReportAnswered:
		for _, c := range in.Sent {
			n.mark(c.TaskARN) // a settled STOPPED makes stopped_acked due
		}
		n.record(now, n.st.Step(now, in).Records...)
	case RuntimeObserved:
		n.observed(now, in)
	case RuntimeUnanswered:
		n.recon.unanswered()
	case ImageSpace:
		n.imageSpace(now, in)
	case OwnRecord:
		n.record(now, event.Record{Event: in.Event})
	case Forced:
		n.payload(now, in.MessageID, in.Verdict)
		for _, a := range in.Actions {
			n.dispatch(now, a)
		}
	default:
		return errUnknownInput(in)
	}
	return nil
}

// tick takes what time made due, then decides until nothing more follows from the journal
// alone: every task the inputs or time touched, the exits its records release, the
// questions of the runtime that are due.
func (n *Node) tick(now time.Time, t Tick) {
	for _, arn := range t.Due {
		n.mark(arn)
	}
	n.calls.takeDue(now, n.mark)
	if t.JournalOpen {
		n.exits.retryRefused(func(x ContainerExited) { n.exit(now, x) })
	}
	for round := 0; (len(n.dirty) > 0 || n.exits.hasReleased()) && round < 64; round++ {
		for x, ok := n.exits.next(); ok; x, ok = n.exits.next() {
			n.exit(now, x)
		}
		arns := n.sortedDirty()
		if len(arns) == 0 {
			continue // Decide with no tasks named would decide for all of them
		}
		d := n.st.decide(now, n.cfg.Config, arns...)
		n.record(now, d.Records...)
		for _, a := range d.Actions {
			n.dispatch(now, a)
		}
		for _, w := range d.Wakes {
			n.wake(w)
		}
	}
	if t.AskRuntime && n.recon.due() {
		n.rd.Reconcile = n.probes()
	}
	if n.imageCycleDue(now) {
		n.rd.ImageSpace = true
	}
}

// advance goes on from the last Ready: what it released is out, what it asked is asked; or,
// its commit failed, the projection is the journal's again and nothing of it happened.
func (n *Node) advance(a Advance) {
	r := n.rd
	n.rd = Ready{}
	if a.Err != nil {
		n.exits.commitFailed()
		n.calls.commitFailed()
		if a.Reload != nil {
			n.st = a.Reload
			clear(n.wakes) // every task asks for its wakes again
			n.markAll()
		}
		return
	}
	n.exits.committed()
	n.calls.released(r.Actions, a.Withheld, n.mark)
	if r.Reconcile != nil {
		n.recon.asking = true
	}
	if r.ImageSpace {
		n.images.asking = true
	}
}

// payload records a payload's verdict and answers it once journaled (also when a record of it
// was refused: quarantine).
func (n *Node) payload(now time.Time, m string, v Verdict) {
	for _, s := range v.Skipped {
		n.note(Note{Kind: NoteSkipped, Subject: event.MessageKey(m), Detail: s})
	}
	if v.Duplicate {
		n.note(Note{Kind: NotePayloadDuplicate, Subject: m})
	} else if len(v.Records) > 0 {
		n.note(Note{Kind: NotePayloadJournaled, Subject: m})
	}
	n.record(now, v.Records...)
	if m != "" {
		n.rd.Acks = append(n.rd.Acks, m)
	}
}

// record stamps (now, where unset), numbers and applies records and keeps them for the
// Ready. A record the projection refuses is dropped and its task quarantined
// (nodequarantine.go); the records of the same call for that task go with it.
func (n *Node) record(now time.Time, recs ...event.Record) {
	var refused map[string]bool // tasks a record of this call was refused for
	for _, rec := range recs {
		if rec.Time.IsZero() {
			rec.Time = now
		}
		rec.Seq = n.st.LastSeq + 1
		err := errDecidedWithRefused
		if rec.Task == "" || !refused[rec.Task] {
			err = n.st.Apply(rec)
		}
		if err != nil {
			standIn, ok := n.refuse(rec, err)
			if rec.Task != "" {
				if refused == nil {
					refused = map[string]bool{}
				}
				refused[rec.Task] = true
			}
			if !ok {
				continue
			}
			rec = standIn // a payload's record: its record_refused is journaled instead
		}
		n.rd.Records = append(n.rd.Records, rec)
		n.afterApply(rec)
	}
}

// afterApply keeps the node's memory in step with the projection: the task is decided again,
// held exits go where the core says, a cleanup deadline is handed out, a cleaned task is
// forgotten.
func (n *Node) afterApply(r event.Record) {
	if r.Task != "" {
		n.mark(r.Task)
	}
	n.exits.after(n.st, r)
	switch r.Event.(type) {
	case *event.StoppedAcked:
		if t := n.st.Tasks[r.Task]; t != nil {
			n.rd.Wakes = append(n.rd.Wakes, Wake{Task: t.ARN, At: t.CleanupDue(n.cfg.Config), Cleanup: true})
		}
	case *event.TaskCleaned:
		n.calls.forget(r.Task)
		delete(n.wakes, r.Task)
	}
}

// mark makes a task decided again at the next Tick.
func (n *Node) mark(arn string) { n.dirty[arn] = true }

// markAll makes every live task decided again.
func (n *Node) markAll() {
	for arn := range n.st.Tasks {
		n.mark(arn)
	}
}

// sortedDirty drains the dirty set in ARN order (determinism), leaving out quarantined tasks:
// nothing more is decided for them.
func (n *Node) sortedDirty() []string {
	out := make([]string, 0, len(n.dirty))
	for a := range n.dirty {
		if n.quarantine.of(a) == "" {
			out = append(out, a)
		}
	}
	clear(n.dirty)
	slices.Sort(out)
	return out
}

// wake hands out a time at which the core's decisions for a task change by time alone, once:
// Decide asks for the same wake each time it looks at the task.
func (n *Node) wake(w Wake) {
	if at, ok := n.wakes[w.Task]; ok && at.Equal(w.At) {
		return
	}
	n.wakes[w.Task] = w.At
	n.rd.Wakes = append(n.rd.Wakes, w)
}

// Waiting reports whether the node has decisions left over (after a refused commit, or more
// rounds than one Tick takes): Tick it when the journal may take them.
func (n *Node) Waiting() bool { return len(n.dirty) > 0 || n.exits.waiting() }

// NextWake is when the node's own rules next change by time alone (zero: never): a call's
// backoff ending, the next image collection cycle.
func (n *Node) NextWake() time.Time {
	next := n.calls.next()
	if n.cfg.ImageInterval > 0 && !n.images.asking && !n.images.at.IsZero() && (next.IsZero() || n.images.at.Before(next)) {
		next = n.images.at
	}
	return next
}

// planCompaction plans, after a snapshot's commit, the compaction the projection and the
// journal's facts allow, unless one runs or the policy keeps everything.
func (n *Node) planCompaction(now time.Time, f JournalFacts) {
	pol := n.cfg.Compaction
	if n.compacting || (pol.Retention < 0 && pol.MaxBytes <= 0) {
		return
	}
	p := n.st.PlanCompaction(now, pol, f)
	n.compacting = !p.Empty()
	n.rd.Compact = &p
}

func (n *Node) note(x Note) { n.rd.Notes = append(n.rd.Notes, x) }

func errUnknownInput(in Input) error { return fmt.Errorf("fsm: node: no input %T", in) }
