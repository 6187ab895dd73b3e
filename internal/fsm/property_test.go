package fsm_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// world drives the node (fsm.Node) the way an engine would, with every choice drawn by rapid:
// which task arrives, when the node decides, which released call it withholds, which runtime
// action fails, which container exits with what code, which reports the control plane
// settles, when time passes and when the control plane re-sends or stops a task. The world is
// the node's environment only — the runtime, the control plane and the clock, with the
// deadlines and backoffs a caller keeps — so every rule it exercises is the node's own. Only
// records the projection accepts make it into the history, as in a real journal.
type world struct {
	t       *rapid.T
	n       *fsm.Node
	st      *fsm.State
	cfg     fsm.Config
	now     time.Time
	history []event.Record
	tasks   int
	// inflight are calls the node released and the runtime has not answered; running is the
	// runtime's truth: which containers run, whatever the projection believes.
	inflight []fsm.Action
	running  map[string]bool
	wakes    []fsm.Wake // deadlines the node asked for, handed back in a Tick once due
	asked    bool       // the node asked the runtime's disk space
	cursor   int64      // the exit stream's
}

// images are the references tasks name, and imageIDs the images each may resolve to.
var (
	images   = []string{"img", "docker.io/library/img:latest", "other:1"}
	imageIDs = map[string][]string{
		"img": {"sha256:img"}, "docker.io/library/img:latest": {"sha256:img"},
		"other:1": {"sha256:other", "sha256:other-repushed", "sha256:img"},
	}
)

func ctrKey(task, ctr string) string { return task + "/" + ctr }

// input hands the node one input, then carries out its Ready as an engine would: the records
// journaled (the history), the released calls made — some withheld — and the node told.
func (w *world) input(in fsm.Input) {
	if err := w.n.Step(w.now, in); err != nil {
		w.t.Fatalf("step %T: %v", in, err)
	}
	r := w.n.Ready()
	if len(r.Dropped) > 0 {
		w.t.Fatalf("the projection refused the core's own record: %v", r.Dropped[0].Err)
	}
	w.history = append(w.history, r.Records...)
	w.wakes = append(w.wakes, r.Wakes...)
	for _, x := range r.Retries {
		if err := w.n.Step(w.now, fsm.RetryAt{Key: x.Key, At: w.now.Add(time.Duration(rapid.IntRange(0, 30).Draw(w.t, "backoff")) * time.Second)}); err != nil {
			w.t.Fatal(err)
		}
	}
	w.asked = w.asked || r.ImageSpace
	var withheld []fsm.ActionKey
	for _, a := range r.Actions {
		if rapid.IntRange(0, 7).Draw(w.t, "withhold") == 0 {
			withheld = append(withheld, a.Key())
			continue
		}
		w.inflight = append(w.inflight, a)
	}
	if err := w.n.Step(w.now, fsm.Advance{Withheld: withheld}); err != nil {
		w.t.Fatal(err)
	}
}

// tick hands the node the deadlines that have come, and has it decide.
func (w *world) tick() {
	var due []string
	kept := w.wakes[:0]
	for _, x := range w.wakes {
		if x.At.After(w.now) {
			kept = append(kept, x)
			continue
		}
		due = append(due, x.Task)
	}
	w.wakes = kept
	w.input(fsm.Tick{Due: due})
}

// record hands the node a fact the control plane sent, as its verdict.
func (w *world) record(task string, e event.Event) {
	w.input(fsm.Forced{Verdict: fsm.Verdict{Records: []event.Record{{Task: task, Event: e}}}})
}

// settle has the control plane answer a report of the pending changes: each accepted,
// rejected or left unsettled by answer.
func (w *world) settle(pending []fsm.Change, answer func() int) {
	sent := make([]protocol.StateChange, len(pending))
	e := &event.ChangesSettled{}
	for i, c := range pending {
		sent[i] = protocol.StateChange{ID: c.ID, TaskARN: c.Task, Container: c.Container, Status: string(c.Status)}
		switch answer() {
		case 0: // listed in neither: not settled
		case 1:
			e.Rejected = append(e.Rejected, event.Rejection{ID: c.ID, Error: "unknown_task"})
		default:
			e.Accepted = append(e.Accepted, c.ID)
		}
	}
	w.input(fsm.ReportAnswered{Sent: sent, Settled: e})
}

func (w *world) step() {
	switch rapid.IntRange(0, 10).Draw(w.t, "what") {
	case 10: // the runtime answers a collection cycle's disk question
		if w.asked {
			w.asked = false
			w.input(fsm.ImageSpace{Free: uint64(rapid.IntRange(0, 100).Draw(w.t, "free percent")), Total: 100})
		}
	case 0: // a task arrives (a few live at once, so each goes deep into its lifecycle)
		if len(w.st.Tasks) >= 3 {
			return
		}
		w.tasks++
		n := rapid.IntRange(1, 3).Draw(w.t, "containers")
		e := &event.TaskAdded{Desired: event.StatusRunning}
		if rapid.IntRange(0, 9).Draw(w.t, "stopped on arrival") == 0 {
			e.Desired = event.StatusStopped
		}
		for i := 0; i < n; i++ {
			e.Containers = append(e.Containers, event.ContainerSpec{Name: fmt.Sprintf("c%d", i), Image: rapid.SampledFrom(images).Draw(w.t, "image"), Essential: i == 0 || rapid.Bool().Draw(w.t, "essential")})
		}
		if n > 1 && rapid.Bool().Draw(w.t, "depends") {
			// c1 waits for c0 to start, or to turn HEALTHY (nothing here ever makes it so);
			// sometimes c0 has a start_timeout_s, which time passing runs out.
			c0, c1 := &e.Containers[0], &e.Containers[1]
			cond := rapid.SampledFrom([]string{event.DependStart, event.DependHealthy}).Draw(w.t, "condition")
			if cond == event.DependHealthy {
				c0.HealthCheck = &event.HealthCheck{Command: []string{"CMD", "probe"}}
			}
			c1.DependsOn = []event.Dependency{{Container: c0.Name, Condition: cond}}
			if rapid.Bool().Draw(w.t, "start timeout") {
				timeout := rapid.IntRange(0, 300).Draw(w.t, "start_timeout_s")
				c0.StartTimeoutS = &timeout
			}
		}
		w.record(fmt.Sprintf("t%d", w.tasks), e)
	case 1: // time passes
		w.now = w.now.Add(time.Duration(rapid.IntRange(1, 120).Draw(w.t, "seconds")) * time.Second)
	case 2: // the control plane settles some of what the submitter would send
		if pending := w.st.Pending(rapid.IntRange(1, 10).Draw(w.t, "batch")); len(pending) > 0 {
			w.settle(pending, func() int { return rapid.IntRange(0, 3).Draw(w.t, "answer") })
		}
	case 3: // a running container exits by itself
		for _, t := range w.st.SortedTasks() {
			for _, c := range t.Containers {
				if c.Known == event.StatusRunning && rapid.Bool().Draw(w.t, "exits") {
					delete(w.running, ctrKey(t.ARN, c.Name))
					w.cursor++
					w.input(fsm.ContainerExited{Task: t.ARN, Container: c.Name, RuntimeID: c.RuntimeID, ExitCode: rapid.IntRange(0, 3).Draw(w.t, "code"), Cursor: w.cursor})
					return
				}
			}
		}
	case 4: // the control plane stops or re-sends a task
		if w.tasks == 0 {
			return
		}
		arn := fmt.Sprintf("t%d", rapid.IntRange(1, w.tasks).Draw(w.t, "task"))
		if t, live := w.st.Tasks[arn]; live && t.Desired == event.StatusRunning && rapid.Bool().Draw(w.t, "stop") {
			w.record(arn, &event.DesiredChanged{To: event.StatusStopped})
		} else if live || w.st.Tombstones[arn] != nil {
			w.record(arn, &event.TaskResent{})
		}
	case 5, 6: // a call in flight comes back
		if len(w.inflight) == 0 {
			return
		}
		i := rapid.IntRange(0, len(w.inflight)-1).Draw(w.t, "call")
		a := w.inflight[i]
		w.inflight = append(w.inflight[:i], w.inflight[i+1:]...)
		w.answer(a)
	default: // the node decides what the inputs and time made due
		w.tick()
		w.checkDependencies(w.n.Ready().Actions)
	}
}

// checkDependencies: a start is decided only once every depends_on condition holds, and no
// container is still waiting once a dependency's start_timeout_s has run out.
func (w *world) checkDependencies(released []fsm.Action) {
	for _, a := range released {
		if a.Kind != fsm.ActStart {
			continue
		}
		t := w.st.Tasks[a.Task]
		for _, dep := range a.Spec.DependsOn {
			o := t.Container(dep.Container)
			if met, _ := dep.Met(o.Known, o.ExitCode, o.Health); !met {
				w.t.Fatalf("start of %s/%s decided while %s is %s (%s wanted)", a.Task, a.Container, o.Name, o.Known, dep.Condition)
			}
		}
	}
	for _, t := range w.st.SortedTasks() {
		for _, c := range t.Containers {
			if wait, ok := t.Waiting(c, w.now); ok && !wait.Due.IsZero() && !w.now.Before(wait.Due) {
				w.t.Fatalf("%s/%s still waits at %s, past its dependency's deadline %s", t.ARN, c.Name, w.now, wait.Due)
			}
		}
	}
}

// answer is the runtime's side of one call: what it does to the runtime's truth, and what
// the engine hears — which may be nothing useful (the runtime down, a timeout) even when the
// call took effect.
func (w *world) answer(a fsm.Action) {
	if a.Kind == fsm.ActRemoveImage {
		w.complete(a, fsm.Result{Kind: rapid.SampledFrom([]fsm.ResultKind{fsm.Succeeded, fsm.Vanished, fsm.Failed, fsm.Refused, fsm.Unavailable}).Draw(w.t, "removal")}, true)
		return
	}
	res := fsm.Result{Kind: fsm.Succeeded}
	switch rapid.IntRange(0, 19).Draw(w.t, "outcome") {
	case 0:
		res = fsm.Result{Kind: fsm.Failed, Err: "injected"}
	case 1:
		res = fsm.Result{Kind: fsm.Unavailable, Err: "runtime down"}
	case 2:
		res = fsm.Result{Kind: fsm.Vanished}
	case 3:
		res = fsm.Result{Kind: fsm.Unknown, Err: "timed out"}
	}
	took := res.Kind == fsm.Succeeded || ((res.Kind == fsm.Unknown || res.Kind == fsm.Unavailable) && rapid.Bool().Draw(w.t, "took effect"))
	w.complete(a, res, took)
}

// complete applies a call's effect on the runtime's truth (when it took) and hands the
// engine's view of it to the core.
func (w *world) complete(a fsm.Action, res fsm.Result, took bool) {
	k := ctrKey(a.Task, a.Container)
	if a.Kind == fsm.ActCreate && res.Kind == fsm.Succeeded {
		res.RuntimeID = "id-" + k
	}
	if res.Kind == fsm.Vanished {
		delete(w.running, k) // the runtime says it is gone: it is (a world that said otherwise would lie)
	}
	switch a.Kind {
	case fsm.ActPull:
		if res.Kind == fsm.Succeeded {
			// The registry: the short and the long spelling of one reference are one image;
			// a tag may have been re-pushed since; the image may have been on the host.
			ids := imageIDs[a.Spec.Image]
			res.ImageID = ids[rapid.IntRange(0, len(ids)-1).Draw(w.t, "resolves to")]
			res.ImageDigest, res.ImagePulled = "d-"+res.ImageID, rapid.Bool().Draw(w.t, "fetched")
		}
	case fsm.ActStart:
		if took {
			w.running[k] = true
		}
	case fsm.ActStop:
		if took {
			delete(w.running, k)
		}
		if res.Kind == fsm.Succeeded {
			res.Exited, res.ExitCode = true, 143
		}
	case fsm.ActInspect:
		if res.Kind == fsm.Succeeded {
			res.Running = w.running[k]
		}
	case fsm.ActRemove:
		delete(w.running, k)
	case fsm.ActFence:
		if res.Kind == fsm.Succeeded {
			res.Running = w.running[k] // refused as running: what runs is the fence's outcome
		}
	}
	w.input(fsm.ActionFinished{Action: a, Result: res})
}

// stoppedButRunning names a container the projection holds STOPPED (and so may report
// STOPPED) while the runtime runs it: what invariant 7 forbids.
func (w *world) stoppedButRunning() string {
	for _, t := range w.st.Tasks {
		for _, c := range t.Containers {
			if c.Known == event.StatusStopped && w.running[ctrKey(t.ARN, c.Name)] {
				return ctrKey(t.ARN, c.Name)
			}
		}
	}
	return ""
}

func newWorld(t *rapid.T) *world {
	cfg := fsm.Config{CleanupWait: time.Duration(rapid.IntRange(0, 300).Draw(t, "wait")) * time.Second}
	n := fsm.NewNode(fsm.New(), fsm.NodeConfig{Config: cfg, RemovalSlots: rapid.IntRange(0, 2).Draw(t, "removal slots"),
		Images:        fsm.ImageConfig{MinAge: time.Duration(rapid.IntRange(0, 300).Draw(t, "image age")) * time.Second, PerCycle: 2, LowFreePercent: 10},
		ImageInterval: time.Duration(rapid.IntRange(1, 120).Draw(t, "image interval")) * time.Second,
		Compaction:    fsm.CompactionPolicy{Retention: -1}})
	return &world{t: t, n: n, st: n.State(), cfg: cfg, now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), running: map[string]bool{}}
}

// run takes between one and most steps, as many as rapid draws; after each, no container the
// projection holds STOPPED runs on the runtime (invariant 7).
func (w *world) run(most int) {
	steps := rapid.IntRange(1, most).Draw(w.t, "steps")
	for i := 0; i < steps; i++ {
		w.step()
		if k := w.stoppedButRunning(); k != "" {
			w.t.Fatalf("step %d: %s is STOPPED in the projection while the runtime runs it", i, k)
		}
	}
}

// Random valid histories keep every invariant, checked the way `agentd journal verify` does,
// plus the guard stated directly: a task's cleanup starts only after its STOPPED change was
// settled and only once the wait since its journaled stop has passed.
func TestPropertyInvariantsHold(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(rt)
		w.run(300)
		c := fsm.NewChecker(nil)
		stoppedAt := map[string]time.Time{}
		for _, r := range w.history {
			if e, ok := r.Event.(*event.TaskTransitioned); ok && e.To == event.StatusStopped {
				stoppedAt[r.Task] = r.Time
			}
			if _, ok := r.Event.(*event.CleanupStarted); ok {
				task := c.State.Tasks[r.Task]
				if task == nil || task.Known != event.StatusStoppedAcked || task.Sent != event.StatusStopped {
					rt.Fatalf("record %d: cleanup of %s without its STOPPED settled", r.Seq, r.Task)
				}
				if r.Time.Before(stoppedAt[r.Task].Add(w.cfg.CleanupWait)) {
					rt.Fatalf("record %d: cleanup of %s before the wait passed", r.Seq, r.Task)
				}
			}
			c.Record(r)
		}
		if len(c.Violations) > 0 {
			rt.Fatalf("violations: %v", c.Violations)
		}
	})
}

// Replay is deterministic, and a snapshot taken anywhere plus the tail equals full replay,
// byte for byte.
func TestPropertySnapshotPlusTailEqualsReplay(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(rt)
		w.run(200)
		want, _ := w.st.Snapshot()
		replay := func(recs []event.Record, from *fsm.State) []byte {
			for _, r := range recs {
				if err := from.Apply(r); err != nil {
					rt.Fatal(err)
				}
			}
			b, _ := from.Snapshot()
			return b
		}
		if got := replay(w.history, fsm.New()); !bytes.Equal(got, want) {
			rt.Fatalf("replay differs from the live projection")
		}
		cut := rapid.IntRange(0, len(w.history)).Draw(rt, "cut")
		part := fsm.New()
		replay(w.history[:cut], part)
		snap, _ := part.Snapshot()
		restored, err := fsm.Restore(snap)
		if err != nil {
			rt.Fatal(err)
		}
		if got := replay(w.history[cut:], restored); !bytes.Equal(got, want) {
			rt.Fatalf("snapshot at %d + tail differs from full replay", cut)
		}
		// And the decisions agree too: the engine after a restart does what it would have done.
		if a, b := formatDecisions(restored.Decide(w.now, w.cfg)), formatDecisions(w.st.Decide(w.now, w.cfg)); a != b {
			rt.Fatalf("decisions differ after restore:\n%s\n%s", a, b)
		}
	})
}

// Every task ends cleaned when the control plane eventually settles everything and time passes:
// nothing waits forever on the agent's side. The node is driven on: every call it releases is
// answered at once (the runtime healed), every report accepted, the clock moved to the next
// deadline it asked for when nothing else is left.
func TestPropertyEverythingSettlesToTombstones(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(rt)
		w.run(150)
		for _, task := range w.st.SortedTasks() {
			if task.Desired == event.StatusRunning {
				w.record(task.ARN, &event.DesiredChanged{To: event.StatusStopped})
			}
		}
		w.now = w.now.Add(time.Hour)
		for len(w.inflight) > 0 { // the calls out come back, the runtime healed
			a := w.inflight[0]
			w.inflight = w.inflight[1:]
			w.complete(a, fsm.Result{Kind: fsm.Succeeded, Exited: a.Kind == fsm.ActStop}, true)
		}
		for i := 0; i < 10000 && (len(w.st.Tasks) > 0 || w.st.OutboxLen() > 0); i++ {
			if p := w.st.Pending(100); len(p) > 0 {
				w.settle(p, func() int { return 2 })
				continue
			}
			if len(w.inflight) > 0 {
				a := w.inflight[0]
				w.inflight = w.inflight[1:]
				res := fsm.Result{Kind: fsm.Failed, Err: "task stopping"}
				switch a.Kind {
				case fsm.ActRemove, fsm.ActStop, fsm.ActInspect, fsm.ActRemoveImage, fsm.ActFence:
					res = fsm.Result{Kind: fsm.Succeeded, Exited: a.Kind == fsm.ActStop}
				}
				w.complete(a, res, res.Kind == fsm.Succeeded)
				continue
			}
			seq := w.st.LastSeq
			w.tick()
			if w.st.LastSeq != seq || len(w.inflight) > 0 || w.n.Waiting() { // a withheld call: decided again
				continue
			}
			next := w.n.NextWake() // a backoff, the next image cycle
			for _, x := range w.wakes {
				if next.IsZero() || x.At.Before(next) {
					next = x.At
				}
			}
			if !next.After(w.now) {
				rt.Fatalf("stuck with %d live tasks:\n%s", len(w.st.Tasks), w.st.Format(w.now, w.cfg))
			}
			w.now = next // only a wait is left
		}
		if len(w.st.Tasks) > 0 || w.st.OutboxLen() > 0 {
			rt.Fatalf("did not settle: %d live, %d unsent:\n%s", len(w.st.Tasks), w.st.OutboxLen(), w.st.Format(w.now, w.cfg))
		}
		if len(w.st.Tombstones) != w.tasks {
			rt.Fatalf("%d tasks, %d tombstones", w.tasks, len(w.st.Tombstones))
		}
	})
}

// TestPropertyRefusalsStayBounded: however many payload records a looping bug in the core has
// refused, with time passing and compactions between them, the projection keeps the newest
// refusals, at most fsm.MaxRefusals, oldest first; a compaction forgets those past the
// retention and no other; and a snapshot restores them as they were.
func TestPropertyRefusalsStayBounded(t *testing.T) {
	type refusal struct {
		seq uint64
		at  time.Time
	}
	rapid.Check(t, func(t *rapid.T) {
		st := fsm.New()
		now := t0
		var seq uint64
		var model []refusal // what the projection must keep
		apply := func(task string, e event.Event) {
			seq++
			if err := st.Apply(event.Record{Seq: seq, Time: now, Task: task, Event: e}); err != nil {
				t.Fatalf("record %d refused: %v", seq, err)
			}
		}
		const retention = time.Hour
		for range rapid.IntRange(1, 12).Draw(t, "rounds") {
			for i := range rapid.IntRange(0, 400).Draw(t, "refusals") {
				m := fmt.Sprintf("m-%d", rapid.IntRange(0, 50).Draw(t, "message")) // the same payload refused again
				apply(fmt.Sprintf("task-%d", i%7), &event.RecordRefused{MessageID: m, Record: "task_added", Reason: "task without containers"})
				model = append(model, refusal{seq, now})
				if len(model) > fsm.MaxRefusals {
					model = model[1:]
				}
			}
			now = now.Add(time.Duration(rapid.IntRange(0, 90).Draw(t, "minutes")) * time.Minute)
			if rapid.Bool().Draw(t, "compact") && seq > 0 {
				horizon := now.Add(-retention)
				var horizonSeq uint64 // the last record at or before the horizon, as the journal finds it
				for _, r := range model {
					if !r.at.After(horizon) {
						horizonSeq = r.seq
					}
				}
				p := st.PlanCompaction(now, fsm.CompactionPolicy{Retention: retention}, fsm.JournalFacts{Snapshots: []uint64{seq}, Newest: seq, HorizonSeq: horizonSeq})
				apply("", p.Done(0))
				for len(model) > 0 && model[0].at.Before(horizon) && model[0].seq <= horizonSeq {
					model = model[1:]
				}
			}
			if len(st.Refusals) > fsm.MaxRefusals {
				t.Fatalf("%d refusals kept, more than %d", len(st.Refusals), fsm.MaxRefusals)
			}
			if len(st.Refusals) != len(model) {
				t.Fatalf("%d refusals kept, want %d", len(st.Refusals), len(model))
			}
			for i, r := range st.Refusals {
				if r.Seq != model[i].seq || !r.At().Equal(model[i].at) {
					t.Fatalf("refusal %d is record %d at %s, want record %d at %s", i, r.Seq, r.At(), model[i].seq, model[i].at)
				}
			}
		}
		snap, err := st.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		back, err := fsm.Restore(snap)
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if again, _ := back.Snapshot(); !bytes.Equal(again, snap) {
			t.Fatal("a restored snapshot differs from the projection it was taken of")
		}
	})
}
