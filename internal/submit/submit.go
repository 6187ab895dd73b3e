package submit

import (
	"math/rand/v2"
	"time"

	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/protocol"
)

// The submitter is its tuning (Policy), its one generator of jitter, and its state in named
// parts, each in the file of what it guards: no field outside them.

// BatchSize is the most changes one request carries (PROTOCOL.md §3).
const BatchSize = protocol.MaxChangesPerRequest

// Policy tunes the waits. The zero value gets the defaults.
type Policy struct {
	Initial     time.Duration // first retry after an unknown outcome (default 100 ms)
	Max         time.Duration // longest backoff (default 30 s)
	SlowRetry   time.Duration // after 401/403 or 400 (default 30 s)
	JournalEach time.Duration // at most one report_attempted record per failure streak this often (default 30 s)
	Seed        uint64        // jitter generator seed (0: random)
	// PollWait is the poller's long-poll wait and ReturnSpread its longest wait between polls
	// that found the control plane unreachable (the engine's; defaults 20 s and 2 s): what a
	// hang's return is judged by (outage.go outageWait, together).
	PollWait     time.Duration
	ReturnSpread time.Duration
	// Naive is the benchmarks' baseline, what a simple client does: one change a request, a
	// retry every second after any failure, no jitter, Retry-After ignored. Never for agents.
	Naive bool
}

// Submitter decides when to report. Not safe for concurrent use: one engine loop owns it. Its
// state is in named parts, each in the file of its concept; p and rng are its tuning and its
// draws (one generator, drawn in one order, so a seed replays every wait).
type Submitter struct {
	p       Policy
	rng     *rand.Rand
	send    sending      // send.go: one report in flight, when the next may go
	burst   burst        // burst.go: when a burst begins and from when it counts
	slot    slot         // slot.go: where in a burst the first report goes
	retry   retryWindow  // retry.go: Retry-After as a floor, the window past it
	outage  outageReturn // outage.go: coming back from an outage at the throttle's rate
	gather  gathering    // gather.go: a burst's first report carries its changes
	streak  streak       // streak.go: the failures in a row, their backoff and health
	isolate isolation    // isolate.go: a change refused alone held while the others flow
}

// Stats counts what the submitter saw, for metrics and the dev view.
type Stats struct {
	Requests, Accepted, Rejected, Throttled, Failed uint64
}

// New returns a submitter.
func New(p Policy) *Submitter {
	if p.Initial <= 0 {
		p.Initial = 100 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 30 * time.Second
	}
	if p.SlowRetry <= 0 {
		p.SlowRetry = 30 * time.Second
	}
	if p.JournalEach <= 0 {
		p.JournalEach = 30 * time.Second
	}
	if p.PollWait <= 0 {
		p.PollWait = pollWait
	}
	if p.ReturnSpread <= 0 {
		p.ReturnSpread = returnSpread
	}
	seed := p.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &Submitter{p: p, rng: rng}
	s.streak.bo = jitter.NewBackoff(p.Initial, p.Max, rng)
	s.isolate = isolation{limit: BatchSize, held: map[string]*held{}}
	s.burst.drained = true // nothing reported yet: the first changes begin a burst
	if p.Naive {
		s.isolate.limit = 1
	}
	return s
}

// spread is a uniformly random point of d.
func (s *Submitter) spread(d time.Duration) time.Duration {
	return time.Duration(s.rng.Float64() * float64(d))
}
