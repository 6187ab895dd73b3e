package powerloss

// The workload: a journal used as the daemon uses it — its data directory prepared, the agent
// id resolved, the seal key set up, then bursts of task lifecycles in group commits, a
// snapshot and the daemon's own compaction plan every snapshot interval, the shipping position
// saved now and then, a reader replaying the journal while it is written, and a second process
// reading the file — each acknowledgement noted with how far the file system's log had got.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentd/agentd/internal/datadir"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/otlpship"
	"github.com/agentd/agentd/internal/seal"
)

const agentID = "agent-powerloss"

// ack is one acknowledged write: what it made durable, and the log's length when it returned
// (every state cut after op LogLen-1 must hold it). The workload runs in a child process (it
// maps the journal: a page fault on the mount in the process serving it can wait on a server
// the Go runtime has stopped) and reports each ack, waiting until the mount noted LogLen.
type ack struct {
	LogLen   int
	First    uint64 // records First.., of these types and tasks
	Types    []event.Type
	Tasks    []string
	Position string // a saved shipping position ("" for records)
	SealKey  string // the seal key's id, once set up
	Journal  string // the journal's id, once opened
}

// run is what the workload did: its acknowledgements, in order.
type run struct {
	acks []ack
}

type workloadOptions struct {
	Dir           string // the data directory, on the mount
	Seed          uint64
	Tasks         int    // task lifecycles journaled (14 records each)
	SnapshotEvery uint64 // the daemon's snapshot interval floor
}

// history builds records as the daemon writes them (the benchmark's churn: a task's whole life
// in 14 records), and follows them in a projection to plan snapshots and compaction.
type history struct {
	j        *journal.Journal
	st       *fsm.State
	now      time.Time
	buf      []event.Record
	lastSnap uint64
	report   func(ack) error
	every    uint64
}

func (h *history) add(task, container string, e event.Event) {
	h.now = h.now.Add(time.Second)
	h.buf = append(h.buf, event.Record{Time: h.now, Task: task, Container: container, Event: e})
}

// task journals one task's life: 14 records, the last seven once it was acknowledged STOPPED.
func (h *history) task(n int) {
	arn := fmt.Sprintf("arn:agentd:task/pl-%06d", n)
	base := h.j.LastSeq() + uint64(len(h.buf)) + 1
	tr := func(from, to event.Status) *event.ContainerTransitioned {
		return &event.ContainerTransitioned{From: from, To: to}
	}
	tk := func(from, to event.Status) *event.TaskTransitioned {
		return &event.TaskTransitioned{From: from, To: to}
	}
	code := n % 3
	h.add(arn, "", &event.TaskAdded{Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "app", Image: "registry.example/web:3", Essential: true}}})
	h.add(arn, "app", tr("NONE", "PULLED"))
	h.add(arn, "", tk("NONE", "PULLED"))
	h.add(arn, "app", &event.ContainerTransitioned{From: "PULLED", To: "CREATED", RuntimeID: "rt-" + arn})
	h.add(arn, "", tk("PULLED", "CREATED"))
	h.add(arn, "app", tr("CREATED", "RUNNING"))
	h.add(arn, "", tk("CREATED", "RUNNING"))
	h.add(arn, "app", &event.ContainerTransitioned{From: "RUNNING", To: "STOPPED", ExitCode: &code})
	h.add(arn, "", tk("RUNNING", "STOPPED"))
	id := func(off uint64) string { return "c-" + h.j.ID() + "-" + strconv.FormatUint(base+off, 10) }
	h.add(arn, "", &event.ChangesSettled{Accepted: []string{id(7), id(8)}})
	h.add(arn, "", &event.StoppedAcked{ChangeID: id(8)})
	h.add(arn, "", &event.CleanupStarted{})
	h.add(arn, "app", &event.ContainerRemoved{})
	h.add(arn, "", &event.TaskCleaned{})
}

// commit appends the buffered records in one group commit and notes the acknowledgement.
func (h *history) commit(ctx context.Context) error {
	if len(h.buf) == 0 {
		return nil
	}
	stored, err := h.j.Append(ctx, h.buf...)
	if err != nil {
		return err
	}
	if err := h.note(stored); err != nil {
		return err
	}
	h.buf = h.buf[:0]
	for _, r := range stored {
		if err := h.st.Apply(r); err != nil {
			return err
		}
	}
	if h.st.LastSeq-h.lastSnap >= engine.SnapshotInterval(h.st, h.every) {
		return h.snapshot(ctx)
	}
	return nil
}

func (h *history) note(stored []event.Record) error {
	a := ack{First: stored[0].Seq}
	for _, r := range stored {
		a.Types = append(a.Types, r.Event.Type())
		a.Tasks = append(a.Tasks, r.Task)
	}
	return h.report(a)
}

// snapshot and compact as the engine does after each snapshot (no retention: every cleaned
// task's records go).
func (h *history) snapshot(ctx context.Context) error {
	at := h.st.LastSeq
	data, err := h.st.Snapshot()
	if err != nil {
		return err
	}
	rec, err := h.j.SaveSnapshot(ctx, at, data, event.Record{Time: h.now, Event: &event.SnapshotTaken{AtSeq: at, Bytes: len(data)}})
	if err != nil {
		return err
	}
	if err := h.note([]event.Record{rec}); err != nil {
		return err
	}
	if err := h.st.Apply(rec); err != nil {
		return err
	}
	h.lastSnap = h.st.LastSeq
	plan, err := engine.PlanCompaction(h.st, h.j, h.now, 0, at, 0)
	if err != nil || plan.Empty() {
		return err
	}
	res, err := h.j.Compact(ctx, plan.UpTo, plan.Drop)
	if err != nil {
		return err
	}
	h.buf = append(h.buf, h.st.Step(h.now, fsm.CompactionFinished{Done: plan.Done(res.Records)}).Records...)
	return h.commit(ctx)
}

// runWorkload runs the journal workload in dataDir (on the mount), reporting every
// acknowledgement as it comes.
func runWorkload(ctx context.Context, dataDir string, o workloadOptions, report func(ack) error) error {
	if err := datadir.Prepare(dataDir, journal.FileName, seal.KeyFileName); err != nil {
		return err
	}
	path := filepath.Join(dataDir, journal.FileName)
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		return err
	}
	defer j.Close()
	if err := report(ack{Journal: j.ID()}); err != nil {
		return err
	}
	if _, err := engine.ResolveAgentID(ctx, j, agentID); err != nil {
		return err
	}
	key, _, err := seal.Setup(ctx, j, filepath.Join(dataDir, seal.KeyFileName), false)
	if err != nil {
		return err
	}
	if err := report(ack{SealKey: key.ID()}); err != nil {
		return err
	}

	// A second process reads the file through the mount all along (as a backup would), and a
	// reader in this one replays the journal while it grows.
	reader := exec.CommandContext(ctx, "sh", "-c", `while :; do cat "$1" >/dev/null; done`, "reader", path)
	if err := reader.Start(); err != nil {
		return err
	}
	defer func() { _ = reader.Process.Kill(); _ = reader.Wait() }()
	stopReplay := make(chan struct{})
	replayDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stopReplay:
				replayDone <- nil
				return
			default:
			}
			if err := j.Iterate(1, func(event.Record) error { return nil }); err != nil {
				replayDone <- fmt.Errorf("replay while writing: %w", err)
				return
			}
		}
	}()

	h := &history{j: j, st: fsm.New(), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), report: report, every: o.SnapshotEvery}
	h.add("", "", &event.AgentStarted{AgentID: agentID, JournalID: j.ID(), Version: "powerloss"})
	rng := rand.New(rand.NewPCG(o.Seed, 44))
	err = func() error {
		for n := 0; n < o.Tasks; {
			for burst := 1 + rng.IntN(4); burst > 0 && n < o.Tasks; burst-- { // bursts of 1-4 tasks a commit
				h.task(n)
				n++
			}
			if err := h.commit(ctx); err != nil {
				return err
			}
			if rng.IntN(5) == 0 {
				pos := strconv.FormatUint(j.LastSeq(), 10)
				if err := j.SetMeta(ctx, otlpship.PositionKey, pos); err != nil {
					return err
				}
				if err := report(ack{Position: pos}); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	close(stopReplay)
	if rerr := <-replayDone; err == nil {
		err = rerr
	}
	return err
}
