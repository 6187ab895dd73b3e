package benchmark

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/runtime"
)

// RecoveryRow is one journal size: the time from open to a ready agent, with snapshots and
// compaction as the daemon keeps them, and without (the baseline: replay of all history).
type RecoveryRow struct {
	Records        int     `json:"records"`
	LiveTasks      int     `json:"live_tasks"`
	Tombstones     int     `json:"tombstones"`
	FileBytes      int64   `json:"file_bytes"`
	BytesPerRecord float64 `json:"bytes_per_record"`
	TailRecords    int     `json:"tail_records"` // records after the newest snapshot: what the restart replays
	ReadyMs        float64 `json:"ready_ms"`
	BaselineMs     float64 `json:"baseline_ready_ms"`
	ReplayAtMs     float64 `json:"replay_at_middle_ms"`     // agentd journal replay --at, halfway through the history
	SizeOverTime   []int64 `json:"used_bytes_each_million"` // the file's size (tx.Size), not the bytes in use
}

// RecoveryResult holds the rows and the ratio the target is stated in.
type RecoveryResult struct {
	Rows         []RecoveryRow `json:"rows"`
	LargeVsSmall float64       `json:"ready_ratio_largest_vs_smallest"`
}

const recordStep = time.Millisecond // virtual time between records

// churnConfig is how the builder keeps a journal: the daemon's snapshot rule and retention.
type churnConfig struct {
	SnapshotEvery uint64        // the daemon's --snapshot-every (engine.SnapshotInterval's floor)
	Retention     time.Duration // in virtual time, recordStep a record
	SizeEvery     uint64        // note the used bytes each time this many records have passed
	Keep          bool          // snapshots and compaction as the daemon does; false: history only
	MaxBytes      int64         // the daemon's --journal-max-bytes (0: none)
	Resends       int           // task_resent records a churn task gets while it runs: a longer history
	// EndAtCadence churns on past total until one more task would make the next snapshot due
	// (settle; bench recovery: the same tail at every size). Off, the journal ends at total.
	EndAtCadence bool
}

// benchChurn is the recovery benchmark's: about 100k records of history kept.
func benchChurn(keep bool) churnConfig {
	return churnConfig{SnapshotEvery: 20000, Retention: 100 * time.Second, SizeEvery: 1000000, Keep: keep, EndAtCadence: keep}
}

// builder writes a journal as a busy agent would: live tasks that keep running, and a churn
// of tasks through their whole life, 14 records each; with the daemon's snapshots and
// compaction when cfg.Keep is set.
type builder struct {
	cfg      churnConfig
	j        *journal.Journal
	st       *fsm.State
	now      time.Time
	buf      []event.Record
	sizes    []int64
	lastSnap uint64
	churned  int   // churn tasks so far
	replays  []int // records after the newest snapshot, noted at each snapshot: what a restart would replay
	rounds   []CompactionRound
}

// CompactionRound is what one compaction after a snapshot found and did.
type CompactionRound struct {
	AtSeq      uint64 // the snapshot it followed
	Tombstones int    // tombstones in the projection before it
	Eligible   int    // of those, cleaned longer ago than the retention
	Forgotten  int    // tombstones it forgot
	Records    int    // records it removed
}

func (b *builder) add(task, container string, e event.Event) {
	b.now = b.now.Add(recordStep)
	b.buf = append(b.buf, event.Record{Time: b.now, Task: task, Container: container, Event: e})
}

func (b *builder) flush(ctx context.Context) error {
	if len(b.buf) == 0 {
		return nil
	}
	stored, err := b.j.Append(ctx, b.buf...)
	if err != nil {
		return err
	}
	b.buf = b.buf[:0]
	if !b.cfg.Keep {
		return nil
	}
	for _, r := range stored {
		if err := b.st.Apply(r); err != nil {
			return err
		}
	}
	if b.st.LastSeq-b.lastSnap >= engine.SnapshotInterval(b.st, b.cfg.SnapshotEvery) {
		b.replays = append(b.replays, int(b.st.LastSeq-b.lastSnap))
		b.lastSnap = b.st.LastSeq
		return b.snapshot(ctx)
	}
	return nil
}

// snapshot and compact as the engine does after each snapshot.
func (b *builder) snapshot(ctx context.Context) error {
	at := b.st.LastSeq
	data, err := b.st.Snapshot()
	if err != nil {
		return err
	}
	rec, err := b.j.SaveSnapshot(ctx, at, data, event.Record{Time: b.now, Event: &event.SnapshotTaken{AtSeq: at, Bytes: len(data)}})
	if err != nil {
		return err
	}
	if err := b.st.Apply(rec); err != nil {
		return err
	}
	// The daemon's own compaction plan, as it runs after each snapshot.
	plan, err := engine.PlanCompaction(b.st, b.j, b.now, b.cfg.Retention, at, b.cfg.MaxBytes)
	if err != nil {
		return err
	}
	round := CompactionRound{AtSeq: at, Tombstones: len(b.st.Tombstones), Eligible: b.eligible()}
	defer func() { b.rounds = append(b.rounds, round) }()
	if plan.Empty() {
		return nil
	}
	res, err := b.j.Compact(ctx, plan.UpTo, plan.Drop)
	if err != nil {
		return err
	}
	// The records that close it, as the engine journals them (fsm.CompactionFinished).
	done, err := b.j.Append(ctx, b.st.Step(b.now, fsm.CompactionFinished{Done: plan.Done(res.Records)}).Records...)
	if err != nil {
		return err
	}
	round.Forgotten, round.Records = len(plan.Tasks), res.Records
	for _, r := range done {
		if err := b.st.Apply(r); err != nil {
			return err
		}
	}
	return nil
}

// eligible counts the tombstones cleaned longer ago than the retention: compaction's backlog.
func (b *builder) eligible() int {
	n := 0
	for _, ts := range b.st.Tombstones {
		if ts.CleanedAt().Before(b.now.Add(-b.cfg.Retention)) {
			n++
		}
	}
	return n
}

// flushAt is how many records the builder commits at once.
const flushAt = 5000

// build writes a journal of about total records with live long-running tasks; with
// cfg.EndAtCadence, a snapshot interval's worth more at most (settle).
func build(ctx context.Context, path string, total, live int, cfg churnConfig) (*builder, error) {
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		return nil, err
	}
	b := &builder{cfg: cfg, j: j, st: fsm.New(), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := engine.ResolveAgentID(ctx, j, "agent-bench"); err != nil {
		j.Close()
		return nil, err
	}
	b.add("", "", &event.AgentStarted{AgentID: "agent-bench", JournalID: j.ID(), Version: "bench"})
	for i := 0; i < live; i++ {
		b.up(fmt.Sprintf("arn:agentd:task/live-%06d", i))
		if len(b.buf) >= flushAt {
			if err := b.flush(ctx); err != nil {
				j.Close()
				return nil, err
			}
		}
	}
	if err := b.churn(ctx, total); err != nil {
		j.Close()
		return nil, err
	}
	if cfg.Keep && cfg.EndAtCadence {
		// On to the end of the snapshot interval: the tail every size is measured with.
		if err := b.settle(ctx); err != nil {
			j.Close()
			return nil, err
		}
	}
	return b, nil
}

var benchSpec = []event.ContainerSpec{{Name: "app", Image: "registry.example/web:3", Essential: true}}

// up journals a task from assignment to RUNNING: 7 records.
func (b *builder) up(arn string) {
	tr := func(from, to event.Status) *event.ContainerTransitioned {
		return &event.ContainerTransitioned{From: from, To: to}
	}
	tk := func(from, to event.Status) *event.TaskTransitioned {
		return &event.TaskTransitioned{From: from, To: to}
	}
	b.add(arn, "", &event.TaskAdded{Desired: event.StatusRunning, Containers: benchSpec})
	b.add(arn, "app", tr("NONE", "PULLED"))
	b.add(arn, "", tk("NONE", "PULLED"))
	b.add(arn, "app", &event.ContainerTransitioned{From: "PULLED", To: "CREATED", RuntimeID: "rt-" + arn})
	b.add(arn, "", tk("PULLED", "CREATED"))
	b.add(arn, "app", tr("CREATED", "RUNNING"))
	b.add(arn, "", tk("CREATED", "RUNNING"))
}

// churn runs tasks through their whole life (14 records each) until the journal's last
// sequence number reaches total, and commits what is left.
func (b *builder) churn(ctx context.Context, total int) error {
	for int(b.j.LastSeq())+len(b.buf) < total {
		if err := b.churnOne(ctx); err != nil {
			return err
		}
	}
	if err := b.flush(ctx); err != nil {
		return err
	}
	b.noteSize()
	return nil
}

// settle churns on until one more task would make the next snapshot due, and stops there:
// every journal ends with the longest tail a restart can meet, a whole snapshot interval
// after the newest snapshot. A restart replays that tail on top of the snapshot, so where a
// build happens to stop in the snapshot cadence decides the ready time as much as the state
// does: stopped at a fixed record count, the 1M journal of 10k live tasks ended 26,832
// records after its snapshot and the 10M one 93,542 (the interval is about 95k there), the
// same snapshot state both, and the recovery ratio read 1.5 (0.8 the round before, the other
// way round). Stopped at the same point of the cadence, the sizes compare like with like: the
// same live state, the same tail, a history ten times as long.
func (b *builder) settle(ctx context.Context) error {
	perTask := uint64(14 + b.cfg.Resends)
	for added := true; added; {
		added = false
		for {
			// b.st lags the records not yet committed, so this interval is at most the one
			// the commit checks (the tombstones they add lengthen it): no commit here takes
			// the snapshot. Once committed, the next pass fills the interval the state has.
			due := b.lastSnap + engine.SnapshotInterval(b.st, b.cfg.SnapshotEvery)
			if b.j.LastSeq()+uint64(len(b.buf))+perTask >= due {
				break
			}
			b.churnTask()
			added = true
			if len(b.buf) >= flushAt {
				if err := b.flush(ctx); err != nil {
					return err
				}
			}
		}
		if err := b.flush(ctx); err != nil {
			return err
		}
	}
	b.noteSize()
	return nil
}

// churnOne journals one churn task and commits every flushAt records.
func (b *builder) churnOne(ctx context.Context) error {
	b.churnTask()
	if len(b.buf) >= flushAt {
		if err := b.flush(ctx); err != nil {
			return err
		}
		b.noteSize()
	}
	return nil
}

// churnTask journals one task's whole life: 14 records, and a task_resent for each of
// cfg.Resends.
func (b *builder) churnTask() {
	code := 0
	arn := fmt.Sprintf("arn:agentd:task/churn-%08d", b.churned)
	b.churned++
	base := b.j.LastSeq() + uint64(len(b.buf)) + 1 // this task's first record's sequence number
	b.up(arn)
	for range b.cfg.Resends {
		b.add(arn, "", &event.TaskResent{}) // a re-sent payload: history, no state
	}
	base += uint64(b.cfg.Resends)
	b.add(arn, "app", &event.ContainerTransitioned{From: "RUNNING", To: "STOPPED", ExitCode: &code})
	b.add(arn, "", &event.TaskTransitioned{From: "RUNNING", To: "STOPPED"})
	id := func(off uint64) string { return "c-" + b.j.ID() + "-" + strconv.FormatUint(base+off, 10) }
	b.add(arn, "", &event.ChangesSettled{Accepted: []string{id(7), id(8)}})
	b.add(arn, "", &event.StoppedAcked{ChangeID: id(8)})
	b.add(arn, "", &event.CleanupStarted{})
	b.add(arn, "app", &event.ContainerRemoved{})
	b.add(arn, "", &event.TaskCleaned{})
}

// noteSize samples the used bytes each time another SizeEvery records have passed.
func (b *builder) noteSize() {
	if n := b.j.LastSeq(); b.cfg.SizeEvery > 0 && n/b.cfg.SizeEvery > uint64(len(b.sizes)) {
		size, _ := b.j.Size()
		b.sizes = append(b.sizes, size)
	}
}

// inventory is a runtime that has every container the journal names, running: recovery is
// measured without the cost of a runtime.
type inventory struct{ runtime.Runtime }

func (inventory) Name() string                                  { return "inventory" }
func (inventory) List(context.Context) ([]runtime.State, error) { return nil, nil }
func (inventory) Inspect(_ context.Context, id string) (runtime.State, error) {
	return runtime.State{ID: id, Running: true}, nil
}
func (inventory) Find(context.Context, string, string) (runtime.State, error) {
	return runtime.State{}, runtime.ErrNotFound
}

// ready opens the journal and recovers an agent: the time to a ready agent.
func ready(ctx context.Context, path string) (time.Duration, *fsm.State, error) {
	start := time.Now()
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		return 0, nil, err
	}
	defer j.Close()
	e := engine.New(engine.Config{AgentID: "agent-bench"}, j, inventory{}, nil, nil, nil, zerolog.Nop())
	if err := e.Recover(ctx); err != nil {
		return 0, nil, err
	}
	return time.Since(start), e.State(), nil
}

// Recovery builds journals of each size (with snapshots and compaction, and without as the
// baseline) with live long-running tasks, and measures open → projection rebuilt → ready.
func Recovery(ctx context.Context, dirParent string, sizes []int, live int) (RecoveryResult, error) {
	var res RecoveryResult
	dir, err := os.MkdirTemp(dirParent, "agentd-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	for _, n := range sizes {
		row := RecoveryRow{Records: n}
		for _, keep := range []bool{true, false} {
			path := filepath.Join(dir, fmt.Sprintf("j-%d-%v.db", n, keep))
			b, err := build(ctx, path, n, live, benchChurn(keep))
			if err != nil {
				return res, err
			}
			if keep {
				row.SizeOverTime = b.sizes
				row.TailRecords = int(b.j.LastSeq() - b.lastSnap)
			}
			used, _ := b.j.Size()
			if keep {
				// The forensics question "what did the agent believe at …": halfway back.
				start := time.Now()
				if _, err := forensics.ReplayAt(b.j, b.now.Add(-time.Duration(n/2)*recordStep)); err != nil {
					return res, err
				}
				row.ReplayAtMs = float64(time.Since(start).Microseconds()) / 1000
			}
			b.j.Close()
			took, st, err := ready(ctx, path)
			if err != nil {
				return res, err
			}
			if keep {
				row.ReadyMs = float64(took.Microseconds()) / 1000
				row.LiveTasks, row.Tombstones = len(st.Tasks), len(st.Tombstones)
				row.FileBytes = used
				row.BytesPerRecord = float64(used) / float64(n)
			} else {
				row.BaselineMs = float64(took.Microseconds()) / 1000
			}
			os.Remove(path)
		}
		res.Rows = append(res.Rows, row)
	}
	if len(res.Rows) > 1 {
		res.LargeVsSmall = res.Rows[len(res.Rows)-1].ReadyMs / res.Rows[0].ReadyMs
	}
	return res, nil
}
