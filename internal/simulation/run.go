package simulation

// One run: its options, what it found, the state it carries, and the loop — steps under
// faults with the checks after each, then the settling once faults stop.

import (
	"math/rand/v2"
	"net/http"
	"os"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/simruntime"
	"github.com/agentd/agentd/internal/testrig"
)

// agentID is the one agent of every run.
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
	// Model: on failure, what the independent protocol model (internal/model) says of the
	// journal as it stands — a second witness that shares no code with the agent.
	Model []string
}

// sim is one run.
type sim struct {
	o     Options
	rng   *rand.Rand
	clock *testrig.Clock
	cp    *controlplane.Server
	cpH   http.Handler
	j     *journal.Journal
	rt    *simruntime.Runtime
	e     *engine.Engine
	exec  *testrig.Executor[engine.Input] // the calls in flight
	mark  runtime.ExitMark                // how far feedExits has handed in the runtime's exits
	trace []string
	full  []string
	hash  uint64
	all   int
	res   *Result
	bugs  int
	// pulls draws the registries' behaviour (slow pulls, transient and permanent failures)
	// from the seed on a stream of its own, so the other draws stay as they were.
	pulls        *rand.Rand
	hostImageID  string
	hostPinnedID string
	opsTaggedID  string // the agent's image the operator tagged too (opsTag), once tagged
	// deps draws start_timeout_s (PROTOCOL.md 1.2 §4) on a stream of its own, for the same reason.
	deps *rand.Rand

	assigned []string
	expected map[string]int // task → containers a valid task runs
	// madeAgain counts the fences that removed a container never run to make it again (each
	// one more container the runtime makes), read from the journal up to madeAgainSeq.
	madeAgain, madeAgainSeq uint64
	unkeyed                 map[string]bool // poison tasks whose ARN breaks the rule: skipped, never reported
	poisoned                int
	throttled               bool
	diskFull                bool // every journal commit fails, as on a full disk
	// runtimeDown: the runtime does not answer a list (reconcile) until the seed says so
	runtimeDown bool
	failRate    float64
	loseRate    float64
	faults      bool
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
	s := &sim{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0xa5a5a5a5)), pulls: rand.New(rand.NewPCG(o.Seed, o.Seed^0x17171717)), deps: rand.New(rand.NewPCG(o.Seed, o.Seed^0x5c5c5c5c)), clock: testrig.NewClock(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)),
		expected: map[string]int{}, unkeyed: map[string]bool{}, res: &Result{Seed: o.Seed}}
	s.cp = controlplane.New("", controlplane.Faults{ResendAcked: true, Seed: o.Seed})
	s.cp.SetClock(func() time.Time { return s.clock.Now() })
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

// TempDir is where runs keep their files: memory-backed when the machine has it, so a
// thousand seeds cost no disk writes (the files are still real bbolt files).
func TempDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}
