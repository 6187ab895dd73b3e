// Package simulation runs the real engine, projection, journal, submitter, simulated runtime
// and reference control plane in one goroutine on a virtual clock, with every choice — what
// the control plane sends, throttles, fails or loses, when the agent crashes, how long each
// call takes — drawn from one seed. The same seed replays the same run exactly.
//
// It promises to check, after every step, that no task was cleaned before the control plane
// accepted its STOPPED and that no container was created twice; and at the end, once faults
// stop, that every task is cleaned, every change settled, and the control plane's record
// agrees with the journal.
package simulation

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/simruntime"
)

const agentID = "agent-sim"

// Options shape one run.
type Options struct {
	Seed     uint64
	Dir      string // a fresh directory for the journal and the runtime's file
	Tasks    int    // tasks the control plane assigns (default 12)
	Steps    int    // steps under faults before they stop (default 600)
	MaxTrace int    // trace lines kept (default 400)
}

// Result is what a run found.
type Result struct {
	Seed      uint64
	Failure   string   // "" when every check held
	Trace     []string // the last steps, to read a failure by
	Focus     []string // on failure: only the steps about the task at fault, and the faults and crashes around them
	TraceHash uint64   // of the whole trace: equal for equal seeds
	Records   uint64
	Crashes   int
	Steps     int
}

// clock is the virtual clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time                         { return c.now }
func (c *clock) After(d time.Duration) <-chan time.Time { return nil } // the run steps time itself

// work is one call in flight on the simulated executor: it completes at a virtual time.
type work struct {
	at  time.Time
	n   int
	run func() engine.Input
}

type workQueue []work

func (q workQueue) Len() int { return len(q) }
func (q workQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].n < q[j].n
}
func (q workQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *workQueue) Push(x any)   { *q = append(*q, x.(work)) }
func (q *workQueue) Pop() any {
	o := *q
	x := o[len(o)-1]
	*q = o[:len(o)-1]
	return x
}

// executor completes each call after a latency drawn from the seed.
type executor struct{ s *sim }

func (x executor) Go(f func() engine.Input) {
	s := x.s
	s.n++
	heap.Push(&s.queue, work{at: s.clock.now.Add(time.Duration(s.rng.IntN(200)) * time.Millisecond), n: s.n, run: f})
}

// sim is one run.
type sim struct {
	o      Options
	rng    *rand.Rand
	clock  *clock
	cp     *controlplane.Server
	cpH    http.Handler
	j      *journal.Journal
	rt     *simruntime.Runtime
	e      *engine.Engine
	queue  workQueue
	n      int
	cursor int64
	trace  []string
	full   []string
	hash   uint64
	all    int
	res    *Result
	bugs   int
	// pulls draws the registries' behaviour (slow pulls, transient and permanent failures)
	// from the seed on a stream of its own, so the other draws stay as they were.
	pulls        *rand.Rand
	hostImageID  string
	hostPinnedID string
	opsTaggedID  string // the agent's image the operator tagged too (opsTag), once tagged
	// deps draws start_timeout_s (PROTOCOL.md 1.2 §4) on a stream of its own, for the same reason.
	deps *rand.Rand

	assigned  []string
	expected  map[string]int  // task → containers a valid task runs
	unkeyed   map[string]bool // poison tasks whose ARN breaks the rule: skipped, never reported
	poisoned  int
	throttled bool
	diskFull  bool // every journal commit fails, as on a full disk
	// runtimeDown: the runtime does not answer a list (reconcile) until the seed says so
	runtimeDown bool
	failRate    float64
	loseRate    float64
	faults      bool
}

// cpClient is the agent's side of the control plane, in process: the requests go through the
// reference control plane's HTTP handler, the faults (5xx, throttling, answers lost after the
// control plane acted on them) are drawn from the seed.
type cpClient struct{ s *sim }

func (c cpClient) Poll(context.Context, time.Duration) ([]protocol.Payload, error) { return nil, nil }
func (c cpClient) Ack(context.Context, []string) error                             { return nil }

func (c cpClient) Report(_ context.Context, changes []protocol.StateChange) protocol.ReportResult {
	s := c.s
	if s.faults && s.rng.Float64() < s.failRate {
		return protocol.ReportResult{Outcome: protocol.ServerError, HTTPStatus: 503}
	}
	if s.faults && s.throttled {
		return protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: time.Duration(1+s.rng.IntN(3)) * time.Second}
	}
	body, _ := json.Marshal(protocol.StateChangesRequest{Changes: changes})
	w := httptest.NewRecorder()
	s.cpH.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/agents/"+agentID+"/state-changes", bytes.NewReader(body)))
	r := protocol.ClassifyReport(w.Code, w.Header().Get("Retry-After"), w.Body.Bytes(), s.clock.now)
	if s.faults && s.rng.Float64() < s.loseRate {
		// The control plane acted, the answer never arrived: the changes go again, same ids.
		s.log("answer lost after the control plane settled %d changes", len(r.Accepted))
		return protocol.ReportResult{Outcome: protocol.Network, Err: fmt.Errorf("connection reset")}
	}
	return r
}

func (s *sim) log(format string, a ...any) {
	line := fmt.Sprintf("%s ", s.clock.now.Format("15:04:05.000")) + fmt.Sprintf(format, a...)
	h := fnv.New64a()
	h.Write([]byte(line))
	s.hash = s.hash*31 + h.Sum64()
	s.all++
	s.full = append(s.full, line)
	s.trace = append(s.trace, line)
	if len(s.trace) > s.o.MaxTrace {
		s.trace = s.trace[len(s.trace)-s.o.MaxTrace:]
	}
}

// Run plays one seed.
func Run(o Options) (res Result) {
	if o.Tasks <= 0 {
		o.Tasks = 12
	}
	if o.Steps <= 0 {
		o.Steps = 600
	}
	if o.MaxTrace <= 0 {
		o.MaxTrace = 400
	}
	s := &sim{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0xa5a5a5a5)), pulls: rand.New(rand.NewPCG(o.Seed, o.Seed^0x17171717)), deps: rand.New(rand.NewPCG(o.Seed, o.Seed^0x5c5c5c5c)), clock: &clock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)},
		expected: map[string]int{}, unkeyed: map[string]bool{}, res: &Result{Seed: o.Seed}}
	s.cp = controlplane.New("", controlplane.Faults{ResendAcked: true, Seed: o.Seed})
	s.cp.SetClock(func() time.Time { return s.clock.now })
	s.cpH = s.cp.Handler()
	s.failRate = []float64{0, 0.05, 0.2}[s.rng.IntN(3)]
	s.loseRate = []float64{0, 0.05, 0.15}[s.rng.IntN(3)]
	s.faults = true
	defer func() {
		if s.j != nil {
			s.j.Close()
		}
		if p := recover(); p != nil {
			s.fail("panic: %v", p)
		}
		s.res.Trace, s.res.TraceHash, s.res.Steps = s.trace, s.hash, s.all
		res = *s.res
	}()
	if err := s.start(); err != nil {
		s.fail("start: %v", err)
		return *s.res
	}
	for step := 0; step < o.Steps && s.res.Failure == ""; step++ {
		s.step()
		s.check()
	}
	if s.res.Failure == "" {
		s.settle()
	}
	if s.j != nil {
		s.res.Records = s.j.LastSeq()
	}
	return *s.res
}

func (s *sim) fail(format string, a ...any) {
	if s.res.Failure == "" {
		s.res.Failure = fmt.Sprintf(format, a...)
		s.log("FAILURE: %s", s.res.Failure)
		s.res.Focus = focus(s.full, s.res.Failure)
		// And what the journal holds of that task: its story, record by record.
		if task := taskInFailure.FindString(s.res.Failure); task != "" && s.j != nil {
			s.res.Focus = append(s.res.Focus, "the journal's records of "+task+":")
			_ = s.j.TaskRecords(task, func(r event.Record) error {
				s.res.Focus = append(s.res.Focus, fmt.Sprintf("  #%d %s %s %s %s", r.Seq, r.Time.Format("15:04:05.000"), r.Type(), r.Container, event.Describe(r.Event)))
				return nil
			})
		}
	}
}

// bugHook counts the engine's error lines: a record the projection refused after the engine
// journaled it is a bug the run must not hide.
type bugHook struct{ s *sim }

func (h bugHook) Run(e *zerolog.Event, level zerolog.Level, msg string) {
	if strings.HasPrefix(msg, "BUG") {
		h.s.bugs++
		h.s.log("engine: %s", msg)
	}
}

// start opens the journal and runtime files and recovers an engine from them — at the
// beginning, and after every crash.
func (s *sim) start() error {
	var err error
	full := func() error {
		if s.diskFull {
			return errors.New("write journal.db: no space left on device (simulated)")
		}
		return nil
	}
	if s.j, err = journal.Open(filepath.Join(s.o.Dir, journal.FileName), journal.Options{BeforeCommit: full}); err != nil {
		return err
	}
	if _, err := engine.ResolveAgentID(context.Background(), s.j, agentID); err != nil {
		return err
	}
	if s.rt, err = simruntime.Open(s.o.Dir, agentID, func() time.Time { return s.clock.now }); err != nil {
		return err
	}
	// Docker's sharp edges, drawn from the seed: a call that times out or breaks after it
	// took effect, and one that fails before it does because the engine is away.
	s.rt.SetFaults(func(op, id string) simruntime.Fault {
		if !s.faults {
			return simruntime.Fault{}
		}
		if op == "list" && s.runtimeDown {
			// The engine is away at the agent's start: reconcile finds nothing until it is
			// back, which the seed decides try by try.
			if s.rng.IntN(3) == 0 {
				s.runtimeDown = false
				s.log("the runtime answers again")
			} else {
				return simruntime.Fault{NoEffect: true, Err: docker.ErrUnavailable}
			}
		}
		switch k := s.rng.IntN(100); {
		case k < 3:
			return simruntime.Fault{Err: context.DeadlineExceeded}
		case k < 5:
			return simruntime.Fault{NoEffect: true, Err: docker.ErrUnavailable}
		}
		return simruntime.Fault{}
	})
	s.registries()
	s.queue = nil
	s.cursor = 0
	log := zerolog.New(nil).Level(zerolog.ErrorLevel).Hook(bugHook{s})
	s.e = engine.New(engine.Config{AgentID: agentID, CleanupWait: time.Duration(s.rng.IntN(5)) * time.Second,
		Seed: s.rng.Uint64() | 1, CleanupWorkers: 2, SnapshotEvery: uint64(50 + s.rng.IntN(200)),
		Submit: engineSubmitPolicy(s.rng.Uint64() | 1),
		Images: engine.ImageGC{Interval: 30 * time.Second, MinAge: time.Duration(s.pulls.IntN(90)) * time.Second, LowFreePercent: 10},
	}, s.j, s.rt, cpClient{s}, s.clock, executor{s}, log)
	if err := s.e.Recover(context.Background()); err != nil {
		return err
	}
	s.e.Step(context.Background(), nil)
	return nil
}

// damageNewestSnapshot flips a byte of the newest snapshot while the agent is down, as a bad
// disk would: recovery must fall back to an older one (or replay) and lose nothing.
func (s *sim) damageNewestSnapshot() {
	j, err := journal.Open(filepath.Join(s.o.Dir, journal.FileName), journal.Options{})
	if err != nil {
		s.fail("open to damage: %v", err)
		return
	}
	defer j.Close()
	seqs, err := j.SnapshotSeqs()
	if err != nil || len(seqs) == 0 {
		return
	}
	if err := j.DamageSnapshot(seqs[len(seqs)-1]); err != nil {
		s.fail("damage snapshot: %v", err)
		return
	}
	s.log("the newest snapshot (at %d) is damaged while the agent is down", seqs[len(seqs)-1])
}

// crash drops every in-memory object mid-flight — calls in flight are lost, as in a real
// crash — and starts again from the files.
func (s *sim) crash() {
	s.res.Crashes++
	s.log("CRASH with %d calls in flight", len(s.queue))
	if err := s.j.Close(); err != nil {
		s.fail("close journal: %v", err)
		return
	}
	s.j = nil
	if s.faults {
		switch s.rng.IntN(8) {
		case 0:
			s.damageNewestSnapshot()
		case 1:
			s.runtimeDown = true
			s.log("the runtime does not answer as the agent starts")
		}
	}
	err := s.start()
	if err != nil && s.diskFull {
		// Recovery journals agent_started: on a full disk it fails with that cause, and the
		// service manager tries again — here once the disk has room.
		s.log("restart refused: the journal cannot take agent_started (disk full); the disk gets room and the agent starts again")
		s.j.Close()
		s.diskFull = false
		err = s.start()
	}
	if err != nil {
		s.fail("restart: %v", err)
	}
}

// poll delivers what the control plane's poll answers, as the poller would: journal, then ack.
func (s *sim) poll() {
	w := httptest.NewRecorder()
	s.cpH.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/agents/"+agentID+"/payloads", nil))
	var pr protocol.PollResponse
	if err := json.Unmarshal(w.Body.Bytes(), &pr); err != nil {
		s.fail("poll answer: %v", err)
		return
	}
	var acks []string
	for _, p := range pr.Payloads {
		done := make(chan error, 1)
		s.e.Step(context.Background(), engine.PayloadInput{Payload: p, Done: done})
		if err := <-done; err != nil {
			if !s.diskFull {
				s.fail("payload %s: %v", p.MessageID, err)
			}
			s.log("payload %s not journaled (disk full), not acknowledged", p.MessageID)
			break
		}
		acks = append(acks, p.MessageID)
	}
	if len(acks) > 0 {
		s.log("poll: %d payloads journaled and acknowledged", len(acks))
		body, _ := json.Marshal(protocol.AcksRequest{MessageIDs: acks})
		s.cpH.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/agents/"+agentID+"/acks", bytes.NewReader(body)))
	}
}

var commands = [][]string{{"run"}, {"sleep", "1s"}, {"sleep", "3s", "2"}, {"exit", "1"}, {"sleep", "500ms", "7"}, {"sleep", "10s"}}

// poison queues a payload that breaks the protocol's limits: a task the agent must record
// STOPPED with a short reason naming the field (a 3.5 KB desired_status, 65 KiB of env, 11
// containers), or skip without a word (an ARN past 256 bytes, or with a space). Whatever it
// holds, the payload is acknowledged and stalls nothing (checked at the end).
func (s *sim) poison() {
	s.poisoned++
	arn := fmt.Sprintf("task/poison-%02d", s.poisoned)
	task := map[string]any{"arn": arn, "desired_status": "RUNNING",
		"containers": []map[string]any{{"name": "app", "image": "img", "command": []string{"run"}}}}
	kind := s.rng.IntN(5)
	switch kind {
	case 0:
		task["desired_status"] = strings.Repeat("RUNNING", 500) // 3.5 KB: past the 1 KiB reason limit if quoted whole
	case 1:
		task["containers"] = []map[string]any{{"name": "app", "image": "img", "env": map[string]string{"BIG": strings.Repeat("x", 65<<10)}}}
	case 2:
		var cs []map[string]any
		for i := 0; i < 11; i++ {
			cs = append(cs, map[string]any{"name": fmt.Sprintf("c%d", i), "image": "img"})
		}
		task["containers"] = cs
	case 3:
		arn = "task/" + strings.Repeat("p", 300) + fmt.Sprint(s.poisoned)
		task["arn"] = arn
	case 4:
		arn = fmt.Sprintf("task/poison %d", s.poisoned)
		task["arn"] = arn
	}
	raw, _ := json.Marshal(task)
	if err := s.cp.AddTask(agentID, protocol.Task{ARN: arn}, raw); err != nil {
		s.fail("poison %s: %v", arn, err)
		return
	}
	if kind >= 3 {
		s.unkeyed[arn] = true
	} else {
		s.assigned = append(s.assigned, arn)
		s.expected[arn] = 0
	}
	s.log("control plane queues poison %d (%d bytes)", kind, len(raw))
}

func (s *sim) assign() {
	i := len(s.assigned)
	arn := fmt.Sprintf("task/sim-%02d", i)
	t := protocol.Task{ARN: arn, DesiredStatus: "RUNNING"}
	n := 1 + s.rng.IntN(2)
	for c := 0; c < n; c++ {
		ct := protocol.Container{Name: fmt.Sprintf("c%d", c), Image: "img", Command: commands[s.rng.IntN(len(commands))]}
		if c > 0 && s.rng.IntN(2) == 0 {
			f := false
			ct.Essential = &f
		}
		if s.rng.IntN(15) == 0 {
			ct.Image = "img-fail-pull"
		}
		switch s.pulls.IntN(6) {
		case 0:
			ct.Image = hostImage // on the host already: never the agent's to remove
			ct.PullPolicy = []string{event.PullNever, event.PullIfNotPresent, event.PullAlways}[s.pulls.IntN(3)]
			if s.o.Seed%2 == 0 && ct.PullPolicy != event.PullNever {
				ct.Image = hostTag // pulled, yet the host's image (pinned by digest): never the agent's either
			}
		case 1:
			ct.Image = "img-b"
		case 2:
			ct.PullPolicy = event.PullAlways
		}
		t.Containers = append(t.Containers, ct)
	}
	if n == 2 && s.rng.IntN(3) == 0 {
		// PROTOCOL.md §4: a health check on c0 (one that passes, or one that fails), and c1
		// waiting on a condition of c0 that the check and c0's essentiality allow.
		c0, c1 := &t.Containers[0], &t.Containers[1]
		words := []string{"CMD", "/testbox", "probe"}
		if s.rng.IntN(3) == 0 {
			words = []string{"CMD", "/testbox", "exit", "1"}
		}
		cond := event.DependStart
		switch s.rng.IntN(3) {
		case 0:
			c0.HealthCheck = &event.HealthCheck{Command: words, IntervalS: 1, Retries: 2}
			cond = event.DependHealthy
		case 1:
			f := false
			c0.Essential = &f
			cond = []string{event.DependComplete, event.DependSuccess}[s.rng.IntN(2)]
		}
		c1.DependsOn = []event.Dependency{{Container: c0.Name, Condition: cond}}
		if s.deps.IntN(2) == 0 {
			// Some deadlines run out before c0 meets the condition (a failing check, a slow
			// pull, a crash), some after: c1 never starts, or starts in time.
			timeout := s.deps.IntN(20)
			c0.StartTimeoutS = &timeout
		}
	}
	switch s.rng.IntN(12) {
	case 0:
		t.DesiredStatus = "STOPPED"
	case 1:
		t.Containers = nil // invalid: recorded STOPPED, never run
	}
	if protocol.Validate(&t) == nil {
		s.expected[arn] = len(t.Containers)
	}
	if err := s.cp.AddTask(agentID, t, nil); err != nil {
		s.fail("assign %s: %v", arn, err)
	}
	s.assigned = append(s.assigned, arn)
	s.log("control plane assigns %s (%d containers, desired %s)", arn, len(t.Containers), t.DesiredStatus)
}

// feedHealth hands the runtime's current health verdicts to the engine, as the health stream
// would (it repeats them; the core records only changes).
func (s *sim) feedHealth() {
	verdicts, _ := s.rt.Verdicts()
	for _, h := range verdicts {
		if r := s.e.Step(context.Background(), engine.HealthInput{Change: h}); len(r.Records) > 0 {
			s.log("runtime: %s/%s turns %s", h.Task, h.Container, h.Health)
		}
	}
}

// feedExits hands the runtime's exits to the engine, as the event stream would.
func (s *sim) feedExits() bool {
	exits, _ := s.rt.ExitsAfter(s.cursor)
	for _, x := range exits {
		s.cursor = max(s.cursor, x.Cursor)
		s.log("runtime: %s/%s exited %d", x.Task, x.Container, x.ExitCode)
		s.e.Step(context.Background(), engine.ExitInput{Exit: x})
	}
	return len(exits) > 0
}

// runWork completes the earliest call in flight if it is due.
func (s *sim) runWork() bool {
	if len(s.queue) == 0 || s.queue[0].at.After(s.clock.now) {
		return false
	}
	w := heap.Pop(&s.queue).(work)
	in := w.run()
	s.log("completes: %s", describe(in))
	s.e.Step(context.Background(), in)
	return true
}

func describe(in engine.Input) string {
	switch in := in.(type) {
	case engine.ActionResult:
		s := in.Action.Key().String()
		if in.Result.Kind != fsm.Succeeded {
			s += " " + string(in.Result.Kind)
		}
		return s
	case engine.ReportInput:
		return fmt.Sprintf("report of %d changes: %s", len(in.Sent), in.Result.Outcome)
	case engine.ExitInput:
		return "exit " + in.Exit.ID
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%T", in)
}

// advance moves the virtual clock to the next thing that happens by itself, or by a little.
func (s *sim) advance(limit time.Duration) {
	next := s.clock.now.Add(limit)
	for _, t := range []time.Time{s.e.NextWake()} {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	if len(s.queue) > 0 && s.queue[0].at.Before(next) {
		next = s.queue[0].at
	}
	if _, exit := s.rt.ExitsAfter(s.cursor); !exit.IsZero() && exit.Before(next) {
		next = exit
	}
	if _, verdict := s.rt.Verdicts(); !verdict.IsZero() && verdict.Before(next) {
		next = verdict
	}
	if next.After(s.clock.now) {
		s.clock.now = next
	}
	s.feedHealth()
	s.e.Step(context.Background(), nil)
}

func (s *sim) step() {
	if s.diskFull && s.rng.IntN(6) == 0 {
		s.diskFull = false // a full disk is freed again within a few steps
		s.log("disk full false")
	}
	switch k := s.rng.IntN(100); {
	case k < 8 && len(s.assigned) < s.o.Tasks:
		if s.rng.IntN(10) == 0 {
			s.poison()
		} else {
			s.assign()
		}
	case k < 20:
		s.poll()
	case k < 23 && len(s.assigned) > 0:
		arn := s.assigned[s.rng.IntN(len(s.assigned))]
		_ = s.cp.StopTask(arn)
		s.log("control plane stops %s", arn)
	case k < 26:
		s.cp.BreakPoll(agentID)
		s.log("poll connection breaks: acknowledged payloads of tasks not known STOPPED will be re-sent")
	case k < 29:
		s.throttled = !s.throttled
		s.log("throttling %v", s.throttled)
	case k < 31:
		s.crash()
	case k < 33:
		// A full disk comes and goes: every burst committed meanwhile fails, its effects
		// dropped and the projection rebuilt — at whatever point the burst was.
		s.diskFull = !s.diskFull
		s.log("disk full %v", s.diskFull)
	case k < 34:
		// The clock jumps forward (a suspended VM, an NTP step): every wait measured from a
		// journaled time must come out right.
		d := time.Duration(1+s.rng.IntN(120)) * time.Minute
		s.clock.now = s.clock.now.Add(d)
		s.log("clock jumps %s", d)
	case k < 60:
		if !s.runWork() && !s.feedExits() {
			s.advance(time.Duration(s.rng.IntN(2000)) * time.Millisecond)
		}
	default:
		s.feedExits()
		s.runWork()
		s.advance(time.Duration(s.rng.IntN(500)) * time.Millisecond)
	}
}

// check runs after every step: the guard, STOPPED means stopped, and nothing run twice.
func (s *sim) check() {
	if s.bugs > 0 {
		s.fail("the projection refused %d records the engine journaled", s.bugs)
		return
	}
	view, _ := s.cp.Snapshot()
	st := s.e.State()
	cleaned := func(arn string) {
		if v := view[arn]; v.Status != "STOPPED" {
			s.fail("GUARD: %s cleaned up while the control plane has it %q, not STOPPED", arn, v.Status)
		}
	}
	for _, t := range st.SortedTasks() { // in order: the failure names the same task every run
		if t.Known == event.StatusCleaning {
			cleaned(t.ARN)
		}
		for _, c := range t.Containers {
			// What the projection holds STOPPED may be reported STOPPED: the runtime must
			// have nothing of it running (invariant 7).
			if c.Known != event.StatusStopped || c.RuntimeID == "" {
				continue
			}
			if rs, err := s.rt.Inspect(context.Background(), c.RuntimeID); err == nil && rs.Running {
				s.fail("STOPPED BUT RUNNING: %s/%s is STOPPED in the journal while the runtime runs it", t.ARN, c.Name)
			}
		}
	}
	tombs := make([]string, 0, len(st.Tombstones))
	for arn := range st.Tombstones {
		tombs = append(tombs, arn)
	}
	slices.Sort(tombs)
	for _, arn := range tombs {
		cleaned(arn)
	}
	want := 0
	for _, n := range s.expected {
		want += n
	}
	if r := s.rt.Reruns(); len(r) > 0 {
		s.fail("RUN TWICE: container %s was started more than once", r[0])
	}
	if got := s.rt.Created(); got > int64(want) {
		s.fail("RUN TWICE: the runtime created %d containers for %d in valid tasks", got, want)
	}
	if v := s.cp.Violations(); len(v) > 0 {
		s.fail("the control plane saw a protocol violation: %+v", v[0])
	}
	s.checkImages()
}

// settle stops the faults, assigns what is left, and lets everything run to the end: every
// task cleaned, every change settled, the control plane agreeing with the journal.
func (s *sim) settle() {
	s.faults, s.throttled, s.diskFull = false, false, false
	s.log("faults stop")
	for len(s.assigned) < s.o.Tasks {
		s.assign()
	}
	for _, arn := range s.assigned {
		_ = s.cp.StopTask(arn)
	}
	for i := 0; i < 20000 && s.res.Failure == ""; i++ {
		st := s.e.State()
		if len(st.Tasks) == 0 && st.OutboxLen() == 0 && len(st.Tombstones) == len(s.assigned) && s.cp.Unacknowledged(agentID) == 0 {
			break
		}
		if i%10 == 0 {
			s.poll()
		}
		if !s.runWork() && !s.feedExits() {
			s.advance(5 * time.Second)
		}
		s.check()
	}
	if s.res.Failure != "" {
		return
	}
	if n := s.cp.Unacknowledged(agentID); n > 0 {
		s.fail("PAYLOAD STALLED: %d payloads never acknowledged", n)
		return
	}
	st := s.e.State()
	if len(st.Tasks) > 0 || st.OutboxLen() > 0 || len(st.Tombstones) != len(s.assigned) {
		s.fail("did not settle: %d live, %d unsent, %d tombstones of %d tasks", len(st.Tasks), st.OutboxLen(), len(st.Tombstones), len(s.assigned))
		return
	}
	view, _ := s.cp.Snapshot()
	arns := make([]string, 0, len(view))
	for arn := range view {
		arns = append(arns, arn)
	}
	slices.Sort(arns)
	for _, arn := range arns {
		if view[arn].Status != "STOPPED" && !s.unkeyed[arn] {
			s.fail("the control plane has %s %q at the end", arn, view[arn].Status)
		}
	}
	// The control plane's exit codes are the journal's.
	err := s.j.Iterate(1, func(r event.Record) error {
		if e, ok := r.Event.(*event.ContainerTransitioned); ok && e.To == event.StatusStopped && e.ExitCode != nil {
			if c := view[r.Task].Containers[r.Container]; c == nil || c.ExitCode == nil || *c.ExitCode != *e.ExitCode {
				s.fail("%s/%s: journal says exit %d, control plane %v", r.Task, r.Container, *e.ExitCode, c)
			}
		}
		return nil
	})
	if err != nil {
		s.fail("journal: %v", err)
	}
	s.log("settled: %d tasks cleaned, %d records", len(s.assigned), s.j.LastSeq())
}

// TempDir is where runs keep their files: memory-backed when the machine has it, so a
// thousand seeds cost no disk writes (the files are still real bbolt files).
func TempDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

var taskInFailure = regexp.MustCompile(`task/sim-[0-9]+`)

// focus cuts a failing run's trace down to what a reader needs: the lines about the task the
// failure names, and the faults and crashes (which concern every task).
func focus(lines []string, failure string) []string {
	task := taskInFailure.FindString(failure)
	var out []string
	for _, l := range lines {
		if (task != "" && strings.Contains(l, task+" ")) || (task != "" && strings.Contains(l, task+"/")) ||
			strings.Contains(l, "CRASH") || strings.Contains(l, "throttling") || strings.Contains(l, "connection breaks") ||
			strings.Contains(l, "answer lost") || strings.Contains(l, "FAILURE") || strings.Contains(l, "faults stop") {
			out = append(out, l)
		}
	}
	return out
}
