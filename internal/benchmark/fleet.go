package benchmark

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/backend"
	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/simruntime"
	"github.com/agentd/agentd/internal/submit"
)

// FleetOptions configure the fleet benchmark: N whole agents in one process (each its own
// engine, journal file, HTTP client and connections, agent id) — or each in a process of its
// own (Processes) — on the simulated runtime, against one reference control plane over real
// HTTP on loopback, throttled fleet-wide.
type FleetOptions struct {
	Agents     int           // --agents
	Tasks      int           // tasks per agent
	RPS        float64       // the control plane's token bucket, requests a second
	Burst      int           // its size
	Outage     time.Duration // how long the control plane answers nothing
	Slow       time.Duration // every answer's delay in the slow scenario
	JournalDir string        // where the agents' journals go ("": the system's temp dir)
	Policies   []string      // "agentd", "naive"
	// RetryAfter is what the control plane's 429s name, one fleet each, every policy under
	// each. Default: every mode (controlplane.RetryAfterModes: turn, next-token, none).
	RetryAfter []string
	// Processes runs each agent as a process of its own (fleetprocess.go): Self, the bench
	// binary, run as `fleet-agent`.
	Processes bool
	Self      string
	// Scenarios: "storm", "slow", "outage-refused", "outage-hanging", "restart" (a storm after
	// every agent restarted) and "restart-unkept" (the same with the places taken out of the
	// journals: the baseline).
	Scenarios []string
	Log       io.Writer // progress (nil: none)
	// Trace, when set, gets one line per request the control plane saw and per scenario's
	// moment (fleettrace.go): what each agent did and when, to find why a row missed.
	Trace io.Writer
}

// FleetRow is one scenario under one policy.
type FleetRow struct {
	Policy         string  `json:"policy"`
	RetryAfter     string  `json:"retry_after"` // the control plane's Retry-After mode
	Scenario       string  `json:"scenario"`
	Agents         int     `json:"agents"`
	Changes        int     `json:"changes"`
	FloorSeconds   float64 `json:"floor_seconds"`
	Seconds        float64 `json:"seconds"` // from the stop (storm, slow) or the return (outage) to the last settled
	Finished       bool    `json:"finished"`
	VsFloor        float64 `json:"vs_floor"`
	Requests       int     `json:"requests"`
	Throttled      int     `json:"throttled"`
	ThrottledShare float64 `json:"throttled_share"`
	AgentP50       float64 `json:"agent_p50_seconds"`
	AgentP99       float64 `json:"agent_p99_seconds"`
	AgentMax       float64 `json:"agent_max_seconds"`
	IdealP50       float64 `json:"ideal_agent_p50_seconds"` // the same percentiles for the ideal schedule (idealAgents)
	IdealP99       float64 `json:"ideal_agent_p99_seconds"`
	Herd           float64 `json:"herd_factor,omitempty"` // outage: most requests in a 1-s window of the first 30 s back ÷ rps
	// HostBest is the storm's settle time in the best schedule this host allowed (hostBest):
	// each agent served as soon as its host had begun its last stop and a token was free.
	HostBest      float64 `json:"host_best_seconds,omitempty"`
	HostBestP50   float64 `json:"host_best_agent_p50_seconds,omitempty"`
	HostBestP99   float64 `json:"host_best_agent_p99_seconds,omitempty"`
	PaceP10       float64 `json:"pace_p10_seconds"` // the agents' learnt slot (submit's Pace) when the scenario began
	PaceP50       float64 `json:"pace_p50_seconds"`
	PaceP90       float64 `json:"pace_p90_seconds"`
	PaceMax       float64 `json:"pace_max_seconds"`
	Cleanups      int     `json:"cleanups"`       // containers removed (the agents cleaned up)
	EarlyCleanups int     `json:"early_cleanups"` // containers removed before their task's STOPPED was accepted
	SettledTwice  int     `json:"settled_twice"`  // STOPPED changes accepted more than once, or never, or violations
	Duplicates    int     `json:"duplicate_ids"`  // the same change id re-sent after it was accepted (an answer lost)
}

// FleetResult is every row, and what the fleet cost.
type FleetResult struct {
	Options       FleetOptions `json:"-"`
	JournalDir    string       `json:"journal_dir"`
	JournalFS     string       `json:"journal_fs"`
	Rows          []FleetRow   `json:"rows"`
	HeapPerAgent  float64      `json:"heap_kb_per_agent"`       // agentd policy, tasks running, after a GC
	GoroutinesPer float64      `json:"goroutines_per_agent"`    // the whole process (agent and control plane sides) ÷ N
	ServingPer    float64      `json:"cp_goroutines_per_agent"` // the control plane's HTTP server alone (a connection each) ÷ N
	JournalIssues int          `json:"journal_verify_findings"` // journal verify over every agent's journal
	Restarted     int          `json:"agents_restarted"`        // agents stopped cleanly and started again (restart scenarios)
	Throttled     int          `json:"requests_429"`            // requests answered 429 in every round, the tasks' starts included
}

// fleetScenarios are the scenarios Fleet plays, in its default order.
var fleetScenarios = []string{"storm", "slow", "outage-refused", "outage-hanging", "restart", "restart-unkept"}

// Fleet runs the scenarios for each policy, a fresh fleet and control plane per policy.
func Fleet(ctx context.Context, o FleetOptions) (FleetResult, error) {
	if o.Agents <= 0 || o.Tasks <= 0 || o.RPS <= 0 || o.Burst <= 0 || o.Outage <= 0 {
		return FleetResult{}, errors.New("bench fleet: --agents, --tasks, --rps, --burst and --outage must be positive")
	}
	if len(o.Policies) == 0 {
		o.Policies = []string{"agentd", "naive"}
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = slices.Clone(fleetScenarios)
	}
	if o.Slow <= 0 {
		o.Slow = 2 * time.Second
	}
	if o.JournalDir == "" {
		o.JournalDir = os.TempDir()
	}
	if len(o.RetryAfter) == 0 {
		o.RetryAfter = slices.Clone(controlplane.RetryAfterModes)
	}
	res := FleetResult{Options: o, JournalDir: o.JournalDir, JournalFS: fsType(o.JournalDir)}
	for _, p := range o.Policies {
		if p != "agentd" && p != "naive" {
			return res, fmt.Errorf("bench fleet: --policy %q: want agentd or naive", p)
		}
	}
	for _, sc := range o.Scenarios {
		if !slices.Contains(fleetScenarios, sc) {
			// Before any agent starts: a scenario named wrong is not found after minutes of
			// fleet (a "restart-…" would have restarted it first).
			return res, fmt.Errorf("bench fleet: --scenarios %q: want one of %s", sc, strings.Join(fleetScenarios, ", "))
		}
	}
	for _, mode := range o.RetryAfter {
		if err := controlplane.CheckRetryAfter(mode); err != nil {
			return res, fmt.Errorf("bench fleet: --%w", err)
		}
	}
	for _, mode := range o.RetryAfter {
		for _, p := range o.Policies {
			f, err := startFleet(ctx, o, p, mode)
			if err != nil {
				return res, err
			}
			rows, err := f.run(ctx, &res)
			res.Rows = append(res.Rows, rows...)
			f.close()
			if err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// fleetAgent is one whole agent.
type fleetAgent struct {
	id     string
	dir    string
	j      *journal.Journal
	rt     *simruntime.Runtime
	client *backend.Client
	e      *engine.Engine
	pol    submit.Policy
	stop   func() error  // the engine's clean stop (its process's, with Processes)
	proc   *fleetProcess // with Processes: the agent's process (j, rt, client, e are nil)
	// lastStop is when (unix ns) the agent's host last began to stop a container: the earliest
	// its report of the stop could go (hostBest).
	lastStop atomic.Int64
}

func (a *fleetAgent) stopped() { a.lastStop.Store(time.Now().UnixNano()) }

type fleet struct {
	o       FleetOptions
	policy  string
	mode    string // the control plane's Retry-After
	cp      *controlplane.Server
	plane   *plane
	agents  []*fleetAgent
	early   atomic.Int64 // removals of a container whose task's STOPPED was not accepted
	removed atomic.Int64 // every removal
	round   int
	heapKB  float64
	gorPer  float64
	logf    func(string, ...any)
	baseMem uint64
	baseGor int
}

func startFleet(ctx context.Context, o FleetOptions, policy, mode string) (*fleet, error) {
	f := &fleet{o: o, policy: policy, mode: mode, logf: func(string, ...any) {}}
	if o.Log != nil {
		f.logf = func(format string, a ...any) {
			fmt.Fprintf(o.Log, "fleet %s (Retry-After %s): "+format+"\n", append([]any{policy, mode}, a...)...)
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f.baseMem, f.baseGor = ms.HeapAlloc, runtime.NumGoroutine()
	f.cp = controlplane.New("", controlplane.Faults{ThrottleRPS: o.RPS, ThrottleBurst: o.Burst, RetryAfter: mode})
	f.plane = &plane{g: &gate{h: f.cp.Handler(), trace: newFleetTrace(o.Trace, policy, mode)}, addr: "127.0.0.1:0"}
	if err := f.plane.up(); err != nil {
		return nil, err
	}
	pol := submit.Policy{Naive: policy == "naive"}
	// A few at a time: a process's start is mostly waiting (its runtime, its journal's fsync).
	f.agents = make([]*fleetAgent, o.Agents)
	errs := make([]error, o.Agents)
	var wg sync.WaitGroup
	starting := make(chan struct{}, 8)
	for i := range f.agents {
		starting <- struct{}{}
		wg.Go(func() {
			defer func() { <-starting }()
			if f.agents[i], errs[i] = f.startAgent(ctx, i, pol); errs[i] != nil {
				errs[i] = fmt.Errorf("bench fleet: agent %d: %w", i, errs[i])
			}
		})
	}
	wg.Wait()
	f.agents = slices.DeleteFunc(f.agents, func(a *fleetAgent) bool { return a == nil })
	if err := errors.Join(errs...); err != nil {
		f.close()
		return nil, err
	}
	f.logf("%d agents up, control plane at %s", len(f.agents), f.plane.addr)
	return f, nil
}

func (f *fleet) startAgent(ctx context.Context, i int, pol submit.Policy) (*fleetAgent, error) {
	dir, err := os.MkdirTemp(f.o.JournalDir, "agentd-fleet-")
	if err != nil {
		return nil, err
	}
	a := &fleetAgent{id: fmt.Sprintf("agent-%04d", i), dir: dir, pol: pol}
	if err := f.open(ctx, a); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return a, nil
}

// open starts agent a over the files in its directory, as its process would — in this
// process, or (Processes) as a process of its own (fleetprocess.go).
func (f *fleet) open(ctx context.Context, a *fleetAgent) error {
	if f.o.Processes {
		return f.spawn(ctx, a)
	}
	return openAgent(ctx, a, "http://"+f.plane.addr, func(arn string) bool { return f.cp.TaskStatus(arn) == "STOPPED" }, func(early bool) {
		f.removed.Add(1)
		if early {
			f.early.Add(1)
		}
	}, a.stopped)
}

// openAgent starts agent a over the files in its directory: the journal, the simulated
// runtime, a new HTTP client to backend, an engine recovered from the journal and run. Every
// container removal is told to removed, early when accepted (the control plane's side) says its
// task's STOPPED was not accepted yet: "cleaned before its ack"; every stop call to stopping.
func openAgent(ctx context.Context, a *fleetAgent, backendURL string, accepted func(arn string) bool, removed func(early bool), stopping func()) error {
	var err error
	if a.j, err = journal.Open(filepath.Join(a.dir, journal.FileName), journal.Options{}); err != nil {
		return err
	}
	fail := func(err error) error { a.shut(); return err }
	if _, err := engine.ResolveAgentID(ctx, a.j, a.id); err != nil {
		return fail(err)
	}
	if a.rt, err = simruntime.Open(a.dir, a.id, nil); err != nil {
		return fail(err)
	}
	rt := a.rt
	rt.SetFaults(func(op, id string) simruntime.Fault {
		switch op {
		case "remove":
			st, err := rt.Inspect(context.Background(), id)
			removed(err == nil && !accepted(st.Task))
		case "stop":
			stopping()
		}
		return simruntime.Fault{}
	})
	if a.client, err = backend.New(backend.Config{URL: backendURL, AgentID: a.id}); err != nil {
		return fail(err)
	}
	e := engine.New(engine.Config{AgentID: a.id, CleanupWait: time.Second, Submit: a.pol}, a.j, a.rt, a.client, nil, nil, zerolog.Nop())
	a.e = e
	if err := e.Recover(ctx); err != nil {
		return fail(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	a.stop = func() error { cancel(); return <-done }
	return nil
}

// restart stops every agent cleanly and starts it again over its files, together (an upgrade
// of the whole fleet): the tasks keep running, and each agent keeps what its journal keeps —
// with unkept, all but its place in the fleet.
func (f *fleet) restart(ctx context.Context, unkept bool) error {
	var wg sync.WaitGroup
	errs := make([]error, len(f.agents))
	for i, a := range f.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.shut(); err != nil {
				errs[i] = fmt.Errorf("bench fleet: %s: clean stop: %w", a.id, err)
				return
			}
			if unkept {
				if err := forgetPlace(ctx, a.dir); err != nil {
					errs[i] = fmt.Errorf("bench fleet: %s: %w", a.id, err)
					return
				}
			}
			if err := f.open(ctx, a); err != nil {
				errs[i] = fmt.Errorf("bench fleet: %s: start again: %w", a.id, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// forgetPlace takes the place the agent kept out of its journal in dir.
func forgetPlace(ctx context.Context, dir string) error {
	j, err := journal.Open(filepath.Join(dir, journal.FileName), journal.Options{})
	if err != nil {
		return err
	}
	return errors.Join(j.SetMeta(ctx, engine.PlaceKey, ""), j.Close())
}

// shut stops the agent's process (the engine, cleanly; its client; its journal), leaving its
// files.
func (a *fleetAgent) shut() error {
	var err error
	if a.stop != nil {
		err = a.stop()
		a.stop = nil
	}
	if a.client != nil {
		a.client.Close()
		a.client = nil
	}
	if a.j != nil {
		err = errors.Join(err, a.j.Close())
		a.j = nil
	}
	return err
}

func (a *fleetAgent) close() {
	a.shut()
	os.RemoveAll(a.dir)
}

func (f *fleet) close() {
	var wg sync.WaitGroup
	for _, a := range f.agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.close() }()
	}
	wg.Wait()
	f.plane.down()
}

// run plays the scenarios in order on one fleet.
func (f *fleet) run(ctx context.Context, res *FleetResult) ([]FleetRow, error) {
	var rows []FleetRow
	for _, sc := range f.o.Scenarios {
		if strings.HasPrefix(sc, "restart") && f.policy == "naive" {
			// The naive policy learns no place, so it has none to keep (its storm is the
			// storm's).
			continue
		}
		arns, err := f.assign(ctx)
		if err != nil {
			return rows, err
		}
		if f.policy == "agentd" && res.HeapPerAgent == 0 && !f.o.Processes {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			res.HeapPerAgent = float64(ms.HeapAlloc-min(ms.HeapAlloc, f.baseMem)) / 1024 / float64(len(f.agents))
			res.GoroutinesPer = float64(runtime.NumGoroutine()-f.baseGor) / float64(len(f.agents))
			res.ServingPer = float64(serving()) / float64(len(f.agents))
		}
		if strings.HasPrefix(sc, "restart") {
			// Every agent stops cleanly and starts again over its journal (an upgrade of the
			// whole fleet, each agent in its own goroutine), its tasks running on; then the
			// storm, from its calm. restart-unkept: the place each agent kept is taken out of
			// its journal first, as before agents kept it (the baseline beside restart).
			if err := f.restart(ctx, sc == "restart-unkept"); err != nil {
				return rows, err
			}
			res.Restarted += len(f.agents)
		}
		f.plane.g.trace.mark("scenario " + sc)
		paces := f.paces(ctx)
		f.logf("%s: learnt slots per second from the burst's start (the throttle serves %.0f a second, %d at once): %s", sc, f.o.RPS, f.o.Burst, perSecondOf(paces))
		var row FleetRow
		switch sc {
		case "storm", "restart", "restart-unkept":
			row, err = f.storm(ctx, arns, 0)
		case "slow":
			row, err = f.storm(ctx, arns, f.o.Slow)
		case "outage-refused", "outage-hanging":
			row, err = f.outage(ctx, arns, strings.TrimPrefix(sc, "outage-"))
		}
		if err != nil {
			return rows, err
		}
		row.Policy, row.Scenario, row.RetryAfter = f.policy, sc, f.mode
		if n := len(paces); n > 0 {
			row.PaceP10, row.PaceP50, row.PaceP90, row.PaceMax = paces[n/10], paces[n/2], paces[n*9/10], paces[n-1]
		}
		f.logf("%s: %.1fs, %.2f× floor %.1fs, %d requests, %.0f%% 429", sc, row.Seconds, row.VsFloor, row.FloorSeconds, row.Requests, 100*row.ThrottledShare)
		rows = append(rows, row)
	}
	_, th := f.plane.g.count(time.Time{}, time.Now())
	res.Throttled += th
	n, err := f.verify()
	res.JournalIssues += n
	return rows, err
}

// perSecondOf counts the sorted slots (seconds) in each second: a schedule the throttle can
// serve has about its rate in each, and the storm's 429s come where the slots are denser than
// that, its idle tokens where they are sparser (the bucket keeps at most its burst of them).
func perSecondOf(slots []float64) string {
	var b strings.Builder
	for sec, i := 0, 0; i < len(slots); sec++ {
		n := 0
		for ; i < len(slots) && slots[i] < float64(sec+1); i++ {
			n++
		}
		fmt.Fprintf(&b, " %d", n)
	}
	return b.String()
}

// paces is every agent's learnt pace in seconds, sorted (none when the agents are processes).
func (f *fleet) paces(ctx context.Context) []float64 {
	var out []float64
	for _, a := range f.agents {
		if a.e == nil {
			continue
		}
		_ = a.e.QueryWithReporting(ctx, func(_ *fsm.State, r engine.Reporting) { out = append(out, r.PaceSeconds) })
	}
	slices.Sort(out)
	return out
}

// assign gives every agent o.Tasks new tasks that run until stopped and waits until the
// control plane has accepted every one RUNNING. It runs under the throttle for agentd — the
// fleet has lived under this control plane, and its pace is learnt here — and unthrottled for
// the naive baseline, which learns nothing and would take many minutes.
func (f *fleet) assign(ctx context.Context) ([]string, error) {
	f.round++
	if f.policy == "naive" {
		f.cp.SetThrottle(0, 0)
		defer f.cp.SetThrottle(f.o.RPS, f.o.Burst)
	}
	var arns []string
	added := time.Now()
	tasks := map[string][]protocol.Task{}
	for _, a := range f.agents {
		for t := 0; t < f.o.Tasks; t++ {
			arn := fmt.Sprintf("task/%s-r%d-%03d", a.id, f.round, t)
			tasks[a.id] = append(tasks[a.id], protocol.Task{ARN: arn, DesiredStatus: "RUNNING", Containers: []protocol.Container{{Name: "app", Image: "app:1"}}})
			arns = append(arns, arn)
		}
	}
	// At one instant, as the storm's stop: the round teaches each agent its place counted
	// from when its payloads came, and the storm replays it from when the stop came.
	if err := f.cp.AddTasks(tasks); err != nil {
		return nil, err
	}
	start := time.Now()
	if !f.await(ctx, arns, "RUNNING", start.Add(10*time.Minute)) {
		return nil, fmt.Errorf("bench fleet: %d tasks not all RUNNING within 10 minutes", len(arns))
	}
	// The round the fleet learns its slots in: how deep its queue was (follow-ups included).
	f.logf("round %d: %d tasks RUNNING in %.1fs; requests (429s) each second from the first task added: %s; agents by requests sent: %s",
		f.round, len(arns), time.Since(start).Seconds(), f.plane.g.perSecond(added, added.Add(20*time.Second)), f.plane.g.perAgent(added, time.Now()))
	return arns, nil
}

// await waits until the control plane has accepted every task's status, or the deadline.
func (f *fleet) await(ctx context.Context, arns []string, status string, deadline time.Time) bool {
	for i := 0; i < len(arns); {
		if f.cp.TaskStatus(arns[i]) == status {
			i++
			continue
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// floor is what the throttle allows: the requests the fleet needs at 100 changes a request,
// counted per agent, less the burst, at rps.
func (f *fleet) floor(changesPerAgent int) float64 {
	per := (changesPerAgent + protocol.MaxChangesPerRequest - 1) / protocol.MaxChangesPerRequest
	return math.Max(0, float64(per*len(f.agents)-f.o.Burst)) / f.o.RPS
}

// idealAgents is the per-agent settle times' p50 and p99 (the same ranks finish takes) for the
// ideal schedule: the throttle busy from the first instant, every agent's changes in as few
// requests as the floor counts, agents served one after another — the burst's first at once,
// then each 1/rps after the last. No schedule does better at the floor: the k-th agent served
// cannot settle before (its requests and those before it − burst) ÷ rps. So p99 ÷ p50 of the
// ideal is about 2 (200 agents, burst 20: 8.9 s ÷ 4.05 s = 2.2), and a target of p99 ≤ 1.5×
// the median is unreachable for any schedule that also meets the floor.
func idealAgents(agents, changesPerAgent, burst int, rps float64) (p50, p99 float64) {
	per := (changesPerAgent + protocol.MaxChangesPerRequest - 1) / protocol.MaxChangesPerRequest
	at := func(rank int) float64 { return math.Max(0, float64((rank+1)*per-burst)) / rps }
	if agents == 0 || rps <= 0 {
		return 0, 0
	}
	return at(agents / 2), at(int(math.Ceil(0.99*float64(agents))) - 1)
}

// limit is how long a scenario may take before it counts as not finished (the naive
// baseline: many times its floor), and the leftovers are drained unthrottled.
func (f *fleet) limit(floor float64) time.Duration {
	return time.Duration(math.Max(4*floor, 30) * float64(time.Second))
}

// calm is how long the fleet has sent no state change when a storm's stop comes: a fleet an
// operator stops has been running its tasks, not reporting them a moment before. Without it the
// stop came within milliseconds of the round that started the tasks, so the throttle's bucket
// was nearly empty where the floor counts it full, and the agents whose last report had
// settled less than 2 s before (the agent's quiet gap: changes that follow a report continue
// its burst) reported the stop at once instead of at their slots — the back of the last queue
// at the front of this one, into 429s. Longer than that gap and than the bucket's refill.
func (f *fleet) calm() time.Duration {
	return max(3*time.Second, time.Duration(float64(f.o.Burst)/f.o.RPS*float64(time.Second))+time.Second)
}

// storm stops every task at once and measures until the last STOPPED is settled; latency
// delays every answer (the slow control plane).
func (f *fleet) storm(ctx context.Context, arns []string, latency time.Duration) (FleetRow, error) {
	changes := 2 * f.o.Tasks // the container's STOPPED and the task's
	row := FleetRow{Agents: len(f.agents), Changes: changes * len(f.agents), FloorSeconds: f.floor(changes)}
	row.IdealP50, row.IdealP99 = idealAgents(len(f.agents), changes, f.o.Burst, f.o.RPS)
	row.IdealP50, row.IdealP99 = row.IdealP50+latency.Seconds(), row.IdealP99+latency.Seconds()
	if !f.plane.g.quiet(ctx, f.calm(), time.Minute) {
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		return row, fmt.Errorf("bench fleet: the fleet still reporting a minute after its tasks were RUNNING: no calm %v to stop it in", f.calm())
	}
	f.plane.g.setLatency(latency)
	defer f.plane.g.setLatency(0)
	early, removed := f.early.Load(), f.removed.Load()
	stats := f.cp.Stats()
	start := time.Now()
	f.plane.g.trace.mark("stop")
	if err := f.cp.StopTasks(arns); err != nil {
		return row, err
	}
	row.Finished = f.await(ctx, arns, "STOPPED", start.Add(f.limit(row.FloorSeconds)+latency))
	end := time.Now()
	f.logf("storm: requests (429s) each second from the stop: %s; agents by requests sent: %s", f.plane.g.perSecond(start, start.Add(20*time.Second)), f.plane.g.perAgent(start, end))
	f.finish(ctx, &row, arns, start, end, stats, early, latency)
	row.Cleanups = int(f.removed.Load() - removed)
	var ready []float64
	for _, a := range f.agents {
		ready = append(ready, max(0, time.Unix(0, a.lastStop.Load()).Sub(start).Seconds()))
	}
	row.HostBest, row.HostBestP50, row.HostBestP99 = hostBest(ready, f.o.Burst, f.o.RPS)
	row.HostBest, row.HostBestP50, row.HostBestP99 = row.HostBest+latency.Seconds(), row.HostBestP50+latency.Seconds(), row.HostBestP99+latency.Seconds()
	return row, ctx.Err()
}

// hostBest is the best any policy could do on this host, as loaded as it was: each agent's one
// request sent the instant its host began its last container stop (ready, seconds from the
// storm: its report cannot go sooner, the stop still to be journaled), served in that order by
// the throttle's bucket (full at the storm, burst tokens, refilled at rps). It returns when the
// last would settle, and the per-agent p50 and p99 — the ideal schedule (idealAgents) with the
// host's own delays in it. Where it is over a target, no policy meets the target on this host.
func hostBest(ready []float64, burst int, rps float64) (last, p50, p99 float64) {
	if len(ready) == 0 || rps <= 0 {
		return 0, 0, 0
	}
	ready = slices.Clone(ready)
	slices.Sort(ready)
	level, at := float64(burst), 0.0
	served := make([]float64, len(ready))
	for i, r := range ready {
		t := max(r, at)
		level = min(float64(burst), level+(t-at)*rps)
		if level < 1 {
			t += (1 - level) / rps
			level = 1
		}
		level--
		served[i], at = t, t
	}
	n := len(served)
	return served[n-1], served[n/2], served[int(math.Ceil(0.99*float64(n)))-1]
}

// outage takes the control plane away (refused: nothing listens; hanging: connections are
// taken and never answered) for o.Outage; the tasks' containers exit halfway through; then it
// comes back, and the drain is measured from the return.
func (f *fleet) outage(ctx context.Context, arns []string, mode string) (FleetRow, error) {
	changes := 2 * f.o.Tasks
	row := FleetRow{Agents: len(f.agents), Changes: changes * len(f.agents), FloorSeconds: f.floor(changes)}
	row.IdealP50, row.IdealP99 = idealAgents(len(f.agents), changes, f.o.Burst, f.o.RPS)
	early, removed := f.early.Load(), f.removed.Load()
	if mode == "refused" {
		f.plane.down()
		f.plane.g.trace.mark("down")
	} else {
		f.plane.g.hang()
	}
	if !sleepCtx(ctx, f.o.Outage/2) {
		return row, ctx.Err()
	}
	if err := f.exitContainers(ctx); err != nil { // the hosts' containers exit while nothing answers
		return row, err
	}
	f.plane.g.trace.mark("exited")
	if !sleepCtx(ctx, f.o.Outage-f.o.Outage/2) {
		return row, ctx.Err()
	}
	stats := f.cp.Stats()
	back := time.Now()
	if mode == "refused" {
		if err := f.plane.up(); err != nil {
			return row, err
		}
		f.plane.g.trace.mark("up")
	} else {
		f.plane.g.release()
	}
	row.Finished = f.await(ctx, arns, "STOPPED", back.Add(f.limit(row.FloorSeconds)))
	end := time.Now()
	f.finish(ctx, &row, arns, back, end, stats, early, 0)
	row.Cleanups = int(f.removed.Load() - removed)
	row.Herd = float64(f.plane.g.busiest(back, back.Add(30*time.Second))) / f.o.RPS
	f.logf("%s outage: requests (429s) each second from the return: %s; agents by requests sent: %s", mode, f.plane.g.perSecond(back, back.Add(20*time.Second)), f.plane.g.perAgent(back, end))
	return row, ctx.Err()
}

// finish fills a row's figures from the control plane's view, and drains what the policy
// left unsettled (unthrottled), so the next scenario starts clean.
func (f *fleet) finish(ctx context.Context, row *FleetRow, arns []string, start, end time.Time, before controlplane.Stats, early int64, latency time.Duration) {
	row.Seconds = end.Sub(start).Seconds()
	floor := row.FloorSeconds + latency.Seconds()
	row.VsFloor = row.Seconds / math.Max(floor, 0.1)
	row.Requests, row.Throttled = f.plane.g.count(start, end)
	if row.Requests > 0 {
		row.ThrottledShare = float64(row.Throttled) / float64(row.Requests)
	}
	if !row.Finished {
		f.cp.SetThrottle(0, 0)
		f.await(ctx, arns, "STOPPED", time.Now().Add(5*time.Minute))
		f.cp.SetThrottle(f.o.RPS, f.o.Burst)
	}
	tasks, stats := f.cp.Snapshot()
	row.Duplicates = stats.ChangesDuplicate - before.ChangesDuplicate
	perAgent := map[string]time.Time{}
	for _, arn := range arns {
		t := tasks[arn]
		stopped := map[string]int{}
		for _, h := range t.History {
			if h.Status == "STOPPED" {
				stopped[h.Container]++
				if h.Container == "" && h.AcceptedAt.After(perAgent[t.Agent]) {
					perAgent[t.Agent] = h.AcceptedAt
				}
			}
		}
		if stopped[""] != 1 || stopped["app"] != 1 {
			row.SettledTwice++
		}
	}
	row.SettledTwice += len(f.cp.Violations())
	var per []float64
	for _, at := range perAgent {
		per = append(per, at.Sub(start).Seconds())
	}
	slices.Sort(per)
	if n := len(per); n > 0 {
		row.AgentP50, row.AgentP99, row.AgentMax = per[n/2], per[int(math.Ceil(0.99*float64(n)))-1], per[n-1]
	}
	// Cleanups follow the acks (CleanupWait 1 s): give them time, then count the early ones.
	sleepCtx(ctx, 3*time.Second)
	row.EarlyCleanups = int(f.early.Load() - early)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// plane serves the control plane on one loopback address that an outage can take away
// (nothing listens: connections refused) and give back.
type plane struct {
	g    *gate
	addr string
	mu   sync.Mutex
	srv  *http.Server
}

func (p *plane) up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("bench fleet: control plane on %s: %w", p.addr, err)
	}
	p.addr = ln.Addr().String()
	p.srv = &http.Server{Handler: p.g, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln) //nolint:errcheck // ends with Close
	return nil
}

// down closes the listener and every connection, long polls included.
func (p *plane) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		p.srv.Close()
		p.srv = nil
	}
}

// gate stands before the control plane: it logs every state-change request (arrival, answer),
// delays answers (slow), and holds connections unanswered (hanging outage).
type gate struct {
	h       http.Handler
	latency atomic.Int64

	trace *fleetTrace // nil: none

	mu      sync.Mutex
	hanging chan struct{} // non-nil while hanging: closed at the return
	hits    []hit
	last    time.Time // when the last state-change request was answered
}

type hit struct {
	at        time.Time
	throttled bool
	agent     string // the request's path, which names the agent
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	hang := g.hanging
	g.mu.Unlock()
	if hang != nil {
		held := time.Now()
		select {
		case <-hang:
		case <-r.Context().Done():
		}
		g.trace.held(r, held)
		panic(http.ErrAbortHandler) // held through the outage, cut at the return
	}
	at := time.Now()
	if d := time.Duration(g.latency.Load()); d > 0 {
		if !sleepCtx(r.Context(), d) {
			return
		}
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/state-changes") {
		if g.trace == nil {
			g.h.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		g.h.ServeHTTP(sw, r)
		g.trace.answered(r, sw)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	g.h.ServeHTTP(sw, r)
	g.trace.answered(r, sw)
	g.mu.Lock()
	g.hits = append(g.hits, hit{at: at, throttled: sw.code == http.StatusTooManyRequests, agent: r.URL.Path})
	g.last = time.Now()
	g.mu.Unlock()
}

// quiet waits until no state-change request has been answered for d, at most within; false
// when the fleet kept reporting that long (or ctx ended).
func (g *gate) quiet(ctx context.Context, d, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		g.mu.Lock()
		since := time.Since(g.last)
		g.mu.Unlock()
		if since >= d {
			return true
		}
		if time.Now().Add(d - since).After(deadline) {
			return false
		}
		if !sleepCtx(ctx, d-since) {
			return false
		}
	}
}

func (g *gate) setLatency(d time.Duration) { g.latency.Store(int64(d)) }

func (g *gate) hang() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hanging = make(chan struct{})
	g.trace.mark("hang")
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hanging != nil {
		close(g.hanging)
		g.hanging = nil
		g.trace.mark("release")
	}
}

// count is the state-change requests that arrived in [from, to], and how many were 429.
func (g *gate) count(from, to time.Time) (n, throttled int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, h := range g.hits {
		if !h.at.Before(from) && !h.at.After(to) {
			n++
			if h.throttled {
				throttled++
			}
		}
	}
	return n, throttled
}

// perSecond lists the state-change requests (429s in brackets) in each second of [from, to).
func (g *gate) perSecond(from, to time.Time) string {
	n := int(to.Sub(from) / time.Second)
	all, th := make([]int, n), make([]int, n)
	g.mu.Lock()
	for _, h := range g.hits {
		if i := int(h.at.Sub(from) / time.Second); !h.at.Before(from) && i < n {
			all[i]++
			if h.throttled {
				th[i]++
			}
		}
	}
	g.mu.Unlock()
	var b strings.Builder
	for i := range all {
		fmt.Fprintf(&b, " %d(%d)", all[i], th[i])
	}
	return b.String()
}

// perAgent says how many agents sent 1, 2, 3 and more state-change requests in [from, to].
func (g *gate) perAgent(from, to time.Time) string {
	g.mu.Lock()
	n := map[string]int{}
	for _, h := range g.hits {
		if !h.at.Before(from) && !h.at.After(to) {
			n[h.agent]++
		}
	}
	g.mu.Unlock()
	var by [4]int
	for _, c := range n {
		by[min(c, 4)-1]++
	}
	return fmt.Sprintf("1: %d, 2: %d, 3: %d, 4+: %d", by[0], by[1], by[2], by[3])
}

// busiest is the most state-change requests in any 1-second window within [from, to].
func (g *gate) busiest(from, to time.Time) int {
	g.mu.Lock()
	var at []time.Time
	for _, h := range g.hits {
		if !h.at.Before(from) && !h.at.After(to) {
			at = append(at, h.at)
		}
	}
	g.mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	best := 0
	for i, j := 0, 0; j < len(at); j++ {
		for at[j].Sub(at[i]) >= time.Second {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// serving counts the goroutines serving HTTP connections in this process — the control
// plane's side of the fleet's connections (long polls and idle keep-alives), the agents'
// clients being other goroutines.
func serving() int {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		return 0
	}
	n, group := 0, 0
	for _, line := range strings.Split(b.String(), "\n") {
		var c int
		if _, err := fmt.Sscanf(line, "%d @", &c); err == nil {
			group = c
			continue
		}
		if strings.Contains(line, "net/http.(*conn).serve") {
			n += group
			group = 0 // once a group
		}
	}
	return n
}

// fsType names the filesystem a directory is on (tmpfs or a disk), for the figure.
func fsType(dir string) string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "unknown"
	}
	abs, _ := filepath.Abs(dir)
	best, typ := "", "unknown"
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (abs == f[1] || strings.HasPrefix(abs, strings.TrimSuffix(f[1], "/")+"/") || f[1] == "/") && len(f[1]) > len(best) {
			best, typ = f[1], f[2]
		}
	}
	return typ + " at " + best
}
