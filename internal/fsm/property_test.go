package fsm_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// world drives the projection the way an engine would, with every choice drawn by rapid:
// which task arrives, which decision is carried out now, which runtime action fails, which
// container exits with what code, which reports the control plane settles, when time passes
// and when the control plane re-sends or stops a task. Only records the projection accepts
// make it into the history, as in a real journal.
type world struct {
	t       *rapid.T
	st      *fsm.State
	cfg     fsm.Config
	now     time.Time
	history []event.Record
	tasks   int
	// inflight are calls made and not yet answered, as the engine holds them (several on one
	// container at once where the core's Gate lets them: the rules the engine runs); running
	// is the runtime's truth: which containers run, whatever the projection believes.
	inflight     []fsm.Action
	running      map[string]bool
	removalSlots int // container removals out at once (0: no bound), as CleanupWorkers
	// what the engine keeps between image cycles for the core: cycles put off, images sitting out
	imagesDeferred int
	imagesRefused  map[string]time.Time
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

func (w *world) apply(task, container string, e event.Event) {
	rec := event.Record{Seq: uint64(len(w.history)) + 1, Time: w.now, Task: task, Container: container, Event: e}
	if err := w.st.Apply(rec); err != nil {
		w.t.Fatalf("the engine's own decision was refused: %v", err)
	}
	w.history = append(w.history, rec)
}

func (w *world) step() {
	switch rapid.IntRange(0, 10).Draw(w.t, "what") {
	case 10: // an image collection cycle, planned by the core's rules as the engine runs one
		cfg := fsm.ImageConfig{MinAge: time.Duration(rapid.IntRange(0, 300).Draw(w.t, "image age")) * time.Second, PerCycle: 2, LowFreePercent: 10}
		free := uint64(rapid.IntRange(0, 100).Draw(w.t, "free percent"))
		p := w.st.PlanImageCycle(w.now, cfg, fsm.ImageCycle{Free: free, Total: 100, Deferred: w.imagesDeferred, Refused: w.imagesRefused}, w.out())
		w.imagesDeferred = p.Deferred
		for _, id := range p.Forget {
			delete(w.imagesRefused, id)
		}
		for _, a := range p.Removals {
			if w.out().Gate(a).Reason == fsm.Go {
				w.inflight = append(w.inflight, a) // answered later, while pulls may be decided
			}
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
		w.apply(fmt.Sprintf("t%d", w.tasks), "", e)
	case 1: // time passes
		w.now = w.now.Add(time.Duration(rapid.IntRange(1, 120).Draw(w.t, "seconds")) * time.Second)
	case 2: // the control plane settles some of what the submitter would send
		pending := w.st.Pending(rapid.IntRange(1, 10).Draw(w.t, "batch"))
		if len(pending) == 0 {
			return
		}
		e := &event.ChangesSettled{}
		for _, c := range pending {
			switch rapid.IntRange(0, 3).Draw(w.t, "answer") {
			case 0: // listed in neither: not settled
			case 1:
				e.Rejected = append(e.Rejected, event.Rejection{ID: c.ID, Error: "unknown_task"})
			default:
				e.Accepted = append(e.Accepted, c.ID)
			}
		}
		w.apply("", "", e)
	case 3: // a running container exits by itself
		for _, t := range w.st.SortedTasks() {
			for _, c := range t.Containers {
				if c.Known == event.StatusRunning && rapid.Bool().Draw(w.t, "exits") {
					delete(w.running, ctrKey(t.ARN, c.Name))
					code := rapid.IntRange(0, 3).Draw(w.t, "code")
					w.apply(t.ARN, c.Name, &event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, ExitCode: &code})
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
			w.apply(arn, "", &event.DesiredChanged{To: event.StatusStopped})
		} else if live || w.st.Tombstones[arn] != nil {
			w.apply(arn, "", &event.TaskResent{})
		}
	case 5, 6: // a call in flight comes back, mapped by the core as the engine does
		if len(w.inflight) == 0 {
			return
		}
		i := rapid.IntRange(0, len(w.inflight)-1).Draw(w.t, "call")
		a := w.inflight[i]
		w.inflight = append(w.inflight[:i], w.inflight[i+1:]...)
		w.answer(a)
	default: // the engine journals a decision, or makes a call (its intent journaled first)
		d := w.st.Decide(w.now, w.cfg)
		w.checkDependencies(d)
		switch {
		case len(d.Records) > 0:
			r := d.Records[rapid.IntRange(0, len(d.Records)-1).Draw(w.t, "record")]
			w.apply(r.Task, r.Container, r.Event)
		case len(d.Actions) > 0:
			a := d.Actions[rapid.IntRange(0, len(d.Actions)-1).Draw(w.t, "action")]
			if w.out().Gate(a).Reason != fsm.Go {
				return // the engine's rule: it waits (fsm.InFlight.Gate)
			}
			for _, r := range a.Intent() {
				w.apply(r.Task, r.Container, r.Event)
			}
			w.inflight = append(w.inflight, a)
		}
	}
}

// out is the engine's view of the calls out, as the engine hands it to the core.
func (w *world) out() fsm.InFlight {
	f := fsm.NewInFlight(w.removalSlots)
	for _, a := range w.inflight {
		f.Add(a.Key())
	}
	return f
}

// checkDependencies: a start is decided only once every depends_on condition holds, and no
// container is still waiting once a dependency's start_timeout_s has run out.
func (w *world) checkDependencies(d fsm.Decisions) {
	for _, a := range d.Actions {
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
	}
	v := w.st.Step(w.now, fsm.ActionFinished{Action: a, Result: res})
	if v.SitOut {
		w.imagesRefused[a.RuntimeID] = w.now
	}
	for _, r := range v.Records {
		w.apply(r.Task, r.Container, r.Event)
	}
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

// nextCleanup is the earliest cleanup deadline of a STOPPED_ACKED task (zero: none).
func nextCleanup(st *fsm.State, cfg fsm.Config) time.Time {
	var next time.Time
	for _, t := range st.Tasks {
		if due := t.CleanupDue(cfg); t.Known == event.StatusStoppedAcked && (next.IsZero() || due.Before(next)) {
			next = due
		}
	}
	return next
}

func newWorld(t *rapid.T) *world {
	return &world{t: t, st: fsm.New(), now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), running: map[string]bool{},
		removalSlots: rapid.IntRange(0, 2).Draw(t, "removal slots"), imagesRefused: map[string]time.Time{},
		cfg: fsm.Config{CleanupWait: time.Duration(rapid.IntRange(0, 300).Draw(t, "wait")) * time.Second}}
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
// nothing waits forever on the agent's side.
func TestPropertyEverythingSettlesToTombstones(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(rt)
		w.run(150)
		for _, task := range w.st.SortedTasks() {
			if task.Desired == event.StatusRunning {
				w.apply(task.ARN, "", &event.DesiredChanged{To: event.StatusStopped})
			}
		}
		w.now = w.now.Add(time.Hour)
		for _, a := range w.inflight { // the calls out come back, the runtime healed
			w.complete(a, fsm.Result{Kind: fsm.Succeeded, Exited: a.Kind == fsm.ActStop}, true)
		}
		w.inflight = nil
		for i := 0; i < 10000 && (len(w.st.Tasks) > 0 || w.st.OutboxLen() > 0); i++ {
			if p := w.st.Pending(100); len(p) > 0 {
				e := &event.ChangesSettled{}
				for _, c := range p {
					e.Accepted = append(e.Accepted, c.ID)
				}
				w.apply("", "", e)
				continue
			}
			d := w.st.Decide(w.now, w.cfg)
			if len(d.Records) == 0 && len(d.Actions) == 0 {
				if due := nextCleanup(w.st, w.cfg); due.After(w.now) {
					w.now = due // only the cleanup wait is left
					continue
				}
				rt.Fatalf("stuck with %d live tasks:\n%s", len(w.st.Tasks), w.st.Format(w.now, w.cfg))
			}
			for _, r := range d.Records {
				w.apply(r.Task, r.Container, r.Event)
			}
			if len(d.Records) > 0 {
				continue
			}
			for _, a := range d.Actions {
				if t := w.st.Tasks[a.Task]; t == nil || t.Container(a.Container).Known != a.From || (a.Kind == fsm.ActRemove && t.Container(a.Container).Removed) {
					continue // an earlier action of this round changed it
				}
				for _, r := range a.Intent() {
					w.apply(r.Task, r.Container, r.Event)
				}
				res := fsm.Result{Kind: fsm.Failed, Err: "task stopping"}
				switch a.Kind {
				case fsm.ActRemove, fsm.ActStop, fsm.ActInspect:
					res = fsm.Result{Kind: fsm.Succeeded, Exited: a.Kind == fsm.ActStop}
				}
				w.complete(a, res, res.Kind == fsm.Succeeded)
			}
		}
		if len(w.st.Tasks) > 0 || w.st.OutboxLen() > 0 {
			rt.Fatalf("did not settle: %d live, %d unsent", len(w.st.Tasks), w.st.OutboxLen())
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
