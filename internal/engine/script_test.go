package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/model"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/testrig"
)

// TestScripts plays the engine's stories in testdata/ (rewrite expectations with -rewrite).
// Each command is an input to the real engine over a real journal file, on a virtual clock;
// its output is what that input came to: the records the burst journaled, then the effects it
// released, as data. Effects are never carried out: the script says what each runtime call
// and each report came to. So the scripts drive the real mapping of the pure core and the
// engine's ordering of effects, not a copy of either.
//
//	agent [wait=3h] [retention=D] [snapshot-every=N] [images=AGE]   start the engine on a fresh journal
//	                                      (images: collect unused pulled images older than AGE every 10m, sooner below 10% free)
//	      [per=N]                         (at most N image removals a cycle)
//	payload id=M                          a payload; one raw task (JSON) per input line
//	outcome KIND TASK/CTR [ok|failed|unavailable|unknown|vanished] [id=X] [exit=N] [running] [err=TEXT]
//	        [ran=OFFSET]                  a failed start whose container the runtime shows started at t0+OFFSET
//	        [image=ID digest=D pulled]    a pull's image, and that the agent fetched it
//	outcome remove-image ID [ok|failed|vanished]
//	space free=N total=M                  the runtime's disk, as a collection cycle asked
//	withhold KIND TASK/CTR                the next burst releases every effect but this call: it is
//	                                      never made (the node hears so at Advance); outcomes answer
//	                                      released calls in any order, so withholding and outcome
//	                                      order together reorder what the runtime does
//	verify                                journal verify's findings (ok: none)
//	exit TASK/CTR [code=N] [oom|oom-unknown] an exit from the runtime's event stream (oom: the kernel
//	                                      killed it; oom-unknown: a 137 whose cause no one could tell)
//	health TASK/CTR HEALTHY|UNHEALTHY     a verdict from the runtime's health stream
//	answer [accept=all|ID,..] [reject=ID,..] | answer status=429|500|400
//	tick DURATION                         time passes; the engine does what is due
//	runtime TASK/CTR running|created|exited=N|gone  what the runtime holds, for the next crash
//	runtime-down true|false               the runtime answers nothing / answers again
//	reconcile                             the released reconcile comes back with what the runtime lists
//	disk full|ok                          every commit fails / works again
//	compact                               run the released compaction on the journal file
//	crash                                 the process dies; a new engine recovers the file
//	state                                 the projection
//	wake                                  when the engine next has something to do by time alone
//	timeline TASK                         journal timeline's text for the task
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &script{t: t, dir: t.TempDir(), clock: testrig.NewClock(t0), rt: &scriptRuntime{byID: map[string]runtime.State{}}}
		t.Cleanup(func() {
			if s.j != nil {
				s.j.Close()
			}
		})
		datadriven.RunTestAny(t, path, s.do)
	})
}

type script struct {
	t     testing.TB
	dir   string
	clock *testrig.Clock
	rt    *scriptRuntime
	j     *journal.Journal
	e     *engine.Engine
	wait  time.Duration
	// images: the unused age of image collection (0: off)
	images time.Duration
	// perCycle: image removals a cycle at most (0: the engine's default)
	perCycle int
	// retention and snapshotEvery shape compaction (0: the engine's defaults)
	retention     time.Duration
	snapshotEvery uint64
	compact       *engine.CompactionPlan       // released and not yet run
	seen          uint64                       // journal records already printed
	actions       map[fsm.ActionKey]fsm.Action // released and not yet answered
	report        []protocol.StateChange       // released and not yet answered
	cursor        int64
	full          atomic.Bool
}

func (s *script) do(t testing.TB, d *datadriven.TestData) string {
	switch d.Cmd {
	case "agent":
		s.wait, s.retention, s.snapshotEvery, s.images, s.perCycle = 3*time.Hour, 0, 0, 0, 0
		for _, arg := range d.CmdArgs {
			switch arg.Key {
			case "wait":
				s.wait = mustDuration(t, arg.Vals[0])
			case "retention":
				s.retention = mustDuration(t, arg.Vals[0])
			case "snapshot-every":
				fmt.Sscan(arg.Vals[0], &s.snapshotEvery)
			case "images":
				s.images = mustDuration(t, arg.Vals[0])
			case "per":
				fmt.Sscan(arg.Vals[0], &s.perCycle)
			}
		}
		return s.start()
	case "compact":
		if s.compact == nil {
			d.Fatalf(t, "no compaction was released")
		}
		plan := *s.compact
		s.compact = nil
		res, err := s.j.Compact(context.Background(), plan.UpTo, plan.Drop)
		return s.step(engine.CompactInput{Done: plan.Done(res.Records), Err: err})
	case "verify": // journal verify: the whole history replayed through the invariant checker
		// and read by the independent model of the protocol: its violations, if any, follow.
		rep, err := forensics.Verify(s.j)
		if err != nil {
			return "verify: " + err.Error() + "\n"
		}
		mrep, err := model.CheckJournal(s.j)
		if err != nil {
			return "verify: " + err.Error() + "\n"
		}
		if len(rep.Findings) == 0 && len(mrep.Violations) == 0 {
			return "ok\n"
		}
		var b strings.Builder
		for _, f := range rep.Findings {
			fmt.Fprintf(&b, "record %d: %s: %s\n", f.Seq, f.Kind, f.Detail)
		}
		for _, v := range mrep.Violations {
			fmt.Fprintf(&b, "model: %s\n", v)
		}
		return b.String()
	case "crash":
		s.j.Close()
		return s.start()
	case "payload":
		var id string
		d.ScanArgs(t, "id", &id)
		var tasks []json.RawMessage
		for _, l := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				tasks = append(tasks, json.RawMessage(l))
			}
		}
		done := make(chan error, 1)
		out := s.step(engine.PayloadInput{Payload: protocol.Payload{MessageID: id, Tasks: tasks}, Done: done})
		if err := <-done; err != nil {
			out += s.ids("not acknowledged: " + err.Error() + "\n")
		}
		return out
	case "outcome":
		return s.outcome(t, d)
	case "withhold":
		task, ctr := subject(t, d.CmdArgs[1].Key)
		s.e.Withhold(fsm.ActionKey{Kind: fsm.ActionKind(d.CmdArgs[0].Key), Task: task, Container: ctr})
		return "ok\n"
	case "exit":
		task, ctr := subject(t, d.CmdArgs[0].Key)
		code := 0
		d.MaybeScanArgs(t, "code", &code)
		c := s.e.State().Tasks[task].Container(ctr)
		s.cursor++
		x := runtime.Exit{ID: c.RuntimeID, Task: task, Container: ctr, ExitCode: code, Cursor: s.cursor, OOMKilled: d.HasArg("oom")}
		if d.HasArg("oom-unknown") {
			x.Reason = runtime.OOMUnknown
		}
		return s.step(engine.ExitInput{Exit: x})
	case "answer":
		return s.answer(t, d)
	case "health":
		task, ctr := subject(t, d.CmdArgs[0].Key)
		c := s.e.State().Tasks[task].Container(ctr)
		return s.step(engine.HealthInput{Change: runtime.HealthChange{ID: c.RuntimeID, Task: task, Container: ctr, Health: event.Health(d.CmdArgs[1].Key)}})
	case "tick":
		s.clock.Set(s.clock.Now().Add(mustDuration(t, d.CmdArgs[0].Key)))
		return s.step(nil)
	case "runtime":
		task, ctr := subject(t, d.CmdArgs[0].Key)
		id := "rt-" + task + "-" + ctr
		if c := s.e.State().Tasks[task]; c != nil && c.Container(ctr).RuntimeID != "" {
			id = c.Container(ctr).RuntimeID
		}
		st := runtime.State{ID: id, Task: task, Container: ctr}
		switch arg := d.CmdArgs[1]; arg.Key {
		case "running":
			st.Running = true
		case "created": // never started
		case "exited":
			st.Exited = true
			fmt.Sscan(arg.Vals[0], &st.ExitCode)
		case "gone":
			delete(s.rt.byID, id)
			return "ok\n"
		}
		s.rt.byID[id] = st
		return "ok\n"
	case "runtime-down":
		s.rt.down = d.CmdArgs[0].Key == "true"
		return "ok\n"
	case "reconcile":
		var observed []fsm.Observed
		list, err := s.rt.List(context.Background())
		for _, st := range list {
			observed = append(observed, fsm.Observed{ID: st.ID, Task: st.Task, Container: st.Container, Running: st.Running, Exited: st.Exited, ExitCode: st.ExitCode})
		}
		return s.step(engine.ReconcileInput{Observed: observed, Err: err})
	case "space":
		var in engine.ImageSpaceInput
		d.ScanArgs(t, "free", &in.Free)
		d.ScanArgs(t, "total", &in.Total)
		return s.step(in)
	case "disk":
		s.full.Store(d.CmdArgs[0].Key == "full")
		return "ok\n"
	case "state":
		return s.ids(s.e.State().Format(s.clock.Now(), fsm.Config{CleanupWait: s.wait}))
	case "wake":
		next := s.e.NextWake()
		if next.IsZero() {
			return "no wake\n"
		}
		return fmt.Sprintf("next wake %s (+%s)\n", next.UTC().Format(time.TimeOnly), next.Sub(t0))
	case "timeline":
		tl, err := forensics.BuildTimeline(s.j, d.CmdArgs[0].Key)
		if err != nil {
			return "timeline: " + err.Error() + "\n"
		}
		var b strings.Builder
		tl.WriteText(&b)
		return s.ids(pid.ReplaceAllString(b.String(), "pid N")) // the test process's own
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

var pid = regexp.MustCompile(`pid [0-9]+`)

// start opens the journal and recovers a new engine from it, as a restarted process would.
func (s *script) start() string {
	s.j = openJournal(s.t, s.dir, &s.full)
	cfg := engine.Config{AgentID: "agent-script", CleanupWait: s.wait, CleanupJitter: -1, Seed: 1,
		Retention: s.retention, SnapshotEvery: s.snapshotEvery}
	if s.images > 0 {
		cfg.Images = engine.ImageGC{Interval: 10 * time.Minute, MinAge: s.images, LowFreePercent: 10, PerCycle: s.perCycle}
	}
	// Effects are never carried out (the executor's work is never run, the control plane never
	// called): the script says what each came to.
	s.e = engine.New(cfg, s.j, s.rt, &testrig.ControlPlane{}, s.clock, &testrig.Executor[engine.Input]{}, zerolog.Nop())
	s.actions, s.report = map[fsm.ActionKey]fsm.Action{}, nil
	if err := s.e.Recover(context.Background()); err != nil {
		return s.journaled() + "recover: " + err.Error() + "\n"
	}
	return s.journaled()
}

// step runs one burst and prints what it journaled and released.
func (s *script) step(in engine.Input) string {
	r := s.e.Step(context.Background(), in)
	for _, a := range r.Actions {
		s.actions[a.Key()] = a
	}
	if len(r.Report) > 0 {
		s.report = r.Report
	}
	if r.Compact != nil {
		s.compact = r.Compact
	}
	out := s.journaled() + s.ids(r.String())
	if out == "" {
		return "nothing\n"
	}
	return out
}

// journaled prints the records the journal holds that were not printed yet: what is durable,
// not what the engine meant to write.
func (s *script) journaled() string {
	var b strings.Builder
	_ = s.j.Iterate(s.seen+1, func(r event.Record) error {
		subj := r.Task
		if r.Container != "" {
			subj += "/" + r.Container
		}
		desc := event.Describe(r.Event)
		if _, ok := r.Event.(*event.AgentStarted); ok {
			desc = "" // pid and journal id differ per run
		}
		fmt.Fprintf(&b, "%s\n", strings.TrimRight(fmt.Sprintf("#%d %s %s %s", r.Seq, r.Type(), subj, desc), " "))
		s.seen = r.Seq
		return nil
	})
	return s.ids(b.String())
}

// ids writes change ids without the journal's random id (c-J-7) and paths without the
// test's temporary directory.
func (s *script) ids(out string) string {
	return strings.NewReplacer("c-"+s.j.ID()+"-", "c-J-", s.dir, "DIR").Replace(out)
}

func (s *script) outcome(t testing.TB, d *datadriven.TestData) string {
	var task, ctr string
	if fsm.ActionKind(d.CmdArgs[0].Key) == fsm.ActRemoveImage {
		ctr = d.CmdArgs[1].Key // an image action has no task; its Container is the image id
	} else {
		task, ctr = subject(t, d.CmdArgs[1].Key)
	}
	key := fsm.ActionKey{Kind: fsm.ActionKind(d.CmdArgs[0].Key), Task: task, Container: ctr}
	a, ok := s.actions[key]
	if !ok {
		d.Fatalf(t, "no %s was released", key)
	}
	delete(s.actions, key)
	res := fsm.Result{Kind: fsm.Succeeded}
	for _, arg := range d.CmdArgs[2:] {
		switch arg.Key {
		case "ok":
		case "failed", "unavailable", "vanished", "unknown", "refused":
			res.Kind = fsm.ResultKind(arg.Key)
		case "running":
			res.Running = true
		case "id":
			res.RuntimeID = arg.Vals[0]
		case "exit":
			res.Exited = true
			fmt.Sscan(arg.Vals[0], &res.ExitCode)
		case "err":
			res.Err = strings.Join(arg.Vals, ",")
		case "ran": // a failed start after which the runtime shows the container ran, started at this offset from t0
			res.Ran, res.StartedAt = true, t0.Add(mustDuration(t, arg.Vals[0]))
		case "image":
			res.ImageID = arg.Vals[0]
		case "digest":
			res.ImageDigest = arg.Vals[0]
		case "pulled":
			res.ImagePulled = true
		}
	}
	if a.Kind == fsm.ActCreate && res.Kind == fsm.Succeeded && res.RuntimeID == "" {
		res.RuntimeID = "ctr-" + ctr
	}
	return s.step(engine.ActionResult{Action: a, Result: res})
}

func (s *script) answer(t testing.TB, d *datadriven.TestData) string {
	if s.report == nil {
		d.Fatalf(t, "no report was released")
	}
	sent := s.report
	s.report = nil
	res := protocol.ReportResult{Outcome: protocol.Settled, HTTPStatus: 200}
	if d.HasArg("status") {
		d.ScanArgs(t, "status", &res.HTTPStatus)
		res.Outcome = map[int]protocol.Outcome{429: protocol.Throttled, 400: protocol.BadRequest, 401: protocol.Unauthorized}[res.HTTPStatus]
		if res.Outcome == "" {
			res.Outcome = protocol.ServerError
		}
		res.RetryAfter = time.Second
		res.Err = fmt.Errorf("HTTP %d", res.HTTPStatus)
	}
	if arg, ok := d.Arg("accept"); ok {
		for _, v := range arg.Vals {
			if v != "all" {
				res.Accepted = append(res.Accepted, v)
				continue
			}
			for _, c := range sent {
				res.Accepted = append(res.Accepted, c.ID)
			}
		}
	}
	if arg, ok := d.Arg("reject"); ok {
		for _, v := range arg.Vals {
			res.Rejected = append(res.Rejected, protocol.Rejection{ID: v, Error: "unknown_task"})
			res.Accepted = slices.DeleteFunc(res.Accepted, func(id string) bool { return id == v })
		}
	}
	return s.step(engine.ReportInput{Sent: sent, Result: res})
}

func subject(t testing.TB, s string) (task, container string) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		t.Fatalf("%q: want TASK/CONTAINER", s)
	}
	return s[:i], s[i+1:]
}

func mustDuration(t testing.TB, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

// scriptRuntime holds what the script says the runtime has, for reconciliation after a
// crash; every call with an effect is refused (effects are never carried out).
type scriptRuntime struct {
	byID map[string]runtime.State
	down bool // List answers that the runtime is unavailable
}

var errScripted = errors.New("scripts carry out no runtime calls")

func (r *scriptRuntime) Name() string { return "script" }
func (r *scriptRuntime) PullImage(context.Context, string, string) (runtime.PullOutcome, error) {
	return runtime.PullOutcome{}, errScripted
}
func (r *scriptRuntime) NeverStarted(string) {}
func (r *scriptRuntime) Health(context.Context) (<-chan runtime.HealthChange, error) {
	return nil, errScripted
}
func (r *scriptRuntime) Logs(context.Context, string, runtime.LogOptions) (io.ReadCloser, error) {
	return nil, errScripted
}
func (r *scriptRuntime) Create(context.Context, runtime.CreateSpec) (string, error) {
	return "", errScripted
}
func (r *scriptRuntime) Start(context.Context, string) error                 { return errScripted }
func (r *scriptRuntime) Stop(context.Context, string, time.Duration) error   { return errScripted }
func (r *scriptRuntime) Remove(context.Context, string) error                { return errScripted }
func (r *scriptRuntime) RemoveUnlessStarted(context.Context, string) error   { return errScripted }
func (r *scriptRuntime) Close() error                                        { return nil }
func (r *scriptRuntime) RemoveImage(context.Context, string, []string) error { return errScripted }
func (r *scriptRuntime) ImageDiskFree(context.Context) (uint64, uint64, error) {
	return 0, 0, errScripted
}
func (r *scriptRuntime) Exits(context.Context, int64) (<-chan runtime.Exit, error) {
	return nil, errScripted
}
func (r *scriptRuntime) Inspect(_ context.Context, id string) (runtime.State, error) {
	if st, ok := r.byID[id]; ok {
		return st, nil
	}
	return runtime.State{}, runtime.ErrNotFound
}
func (r *scriptRuntime) Find(_ context.Context, task, container string) (runtime.State, error) {
	for _, st := range r.byID {
		if st.Task == task && st.Container == container {
			return st, nil
		}
	}
	return runtime.State{}, runtime.ErrNotFound
}
func (r *scriptRuntime) List(context.Context) ([]runtime.State, error) {
	if r.down {
		return nil, fmt.Errorf("list: %w", runtime.ErrUnavailable)
	}
	out := make([]runtime.State, 0, len(r.byID))
	for _, st := range r.byID {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b runtime.State) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
