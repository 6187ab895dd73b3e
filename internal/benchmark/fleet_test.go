package benchmark

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/fsm"
)

// A fleet of 20 agents — each a whole agent over real HTTP — through a throttled outage
// (refused, then hanging) while their tasks stop, under a control plane whose Retry-After
// names turns, one whose names the next token and one whose 429s name nothing: every STOPPED is settled exactly once by id,
// nothing is cleaned before the control plane accepted its task's STOPPED, and every journal
// verifies. With the ack guard planted off (AGENTD_PLANTED_BUGS=cleanup-after-ack, -tags plantedbugs) the early cleanups show.
//
// The three Retry-After modes are three fleets, each with its own control plane, agents and
// journals, as Fleet runs them one after the other; here they run at once, each mode playing
// both outages in order on its own fleet exactly as before. Their time is nearly all waiting
// (the outage, the throttle, the cleanup wait), so at once they take the time of one.
func TestFleetThroughThrottledOutageSettlesOnceAndCleansAfterAck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	modes := controlplane.RetryAfterModes
	results := make([]FleetResult, len(modes))
	errs := make([]error, len(modes))
	var wg sync.WaitGroup
	var trace bytes.Buffer // the first fleet's (FleetOptions.Trace)
	for i, mode := range modes {
		dir := t.TempDir()
		o := FleetOptions{Agents: 20, Tasks: 3, RPS: 10, Burst: 5, Outage: 2 * time.Second,
			JournalDir: dir, Policies: []string{"agentd"}, Scenarios: []string{"outage-refused", "outage-hanging"},
			RetryAfter: []string{mode}}
		if i == 0 {
			o.Trace = &trace
		}
		wg.Go(func() { results[i], errs[i] = Fleet(ctx, o) })
	}
	wg.Wait()
	for i, mode := range modes {
		if errs[i] != nil {
			t.Fatalf("Retry-After %s: %v", mode, errs[i])
		}
	}
	checkTrace(t, trace.String(), "agentd "+modes[0])
	res := results[0]
	for _, r := range results[1:] {
		res.Rows = append(res.Rows, r.Rows...)
		res.JournalIssues += r.JournalIssues
	}
	if len(res.Rows) != 2*len(modes) {
		t.Fatalf("%d rows; want %d (two outages under each Retry-After mode)", len(res.Rows), 2*len(modes))
	}
	for i, r := range res.Rows {
		if want := modes[i/2]; r.RetryAfter != want {
			t.Errorf("row %d (%s) under Retry-After %s; want %s", i, r.Scenario, r.RetryAfter, want)
		}
		if !r.Finished {
			t.Errorf("%s (%s): not every STOPPED settled within the limit (%.1fs)", r.Scenario, r.RetryAfter, r.Seconds)
		}
		if r.SettledTwice != 0 {
			t.Errorf("%s: %d changes not settled exactly once, or protocol violations", r.Scenario, r.SettledTwice)
		}
		if r.Cleanups == 0 {
			t.Errorf("%s: no container cleaned: the check of early cleanups saw nothing", r.Scenario)
		}
		if r.EarlyCleanups != 0 {
			t.Errorf("%s: %d of %d containers removed before their task's STOPPED was accepted", r.Scenario, r.EarlyCleanups, r.Cleanups)
		}
		if r.Requests == 0 || r.Herd == 0 {
			t.Errorf("%s: no state-change request seen after the return (%d, herd %.2f)", r.Scenario, r.Requests, r.Herd)
		}
	}
	// The heap per agent is the bench's figure, not this test's: two fleets and the package's
	// other tests share this process's heap, which can be smaller when it is measured than
	// before the agents started (a race build's CI run: 0 KB).
	if res.ServingPer <= 0 {
		t.Errorf("the control plane's goroutines per agent (%.1f) not measured", res.ServingPer)
	}
	if res.JournalIssues != 0 {
		t.Errorf("journal verify: %d findings over the fleet's journals", res.JournalIssues)
	}
}

// A fleet restarted all at once (an upgrade) keeps each agent's place in it: after every agent
// stopped cleanly and started again over its journal, each agent's slot is the one the
// throttle taught it before (not 0, not another's), so the storm that follows does not send
// every agent's first report at once into the throttle. Every STOPPED of that storm still
// settles once, nothing is cleaned before its ack, every journal verifies. What is compared is
// each agent's own place, not how many 429s the storm met (a loaded host's timing): with the
// place dropped at the restart (engine.restorePlace a no-op) every slot after it is 0.
// (A bucket of one serves a few agents at once: their places, unproved, go; at most a quarter.)
func TestAFleetRestartedTogetherKeepsItsPlaces(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A bucket of one at 5 a second: the agents' reports of their tasks starting, sent within
	// the same moments, are throttled however slow the host, so the fleet learns places.
	o := FleetOptions{Agents: 20, Tasks: 2, RPS: 5, Burst: 1, Outage: time.Second, JournalDir: t.TempDir()}
	f, err := startFleet(ctx, o, "agentd", controlplane.RetryAfterTurn)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	arns, err := f.assign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !f.plane.g.quiet(ctx, f.calm(), time.Minute) {
		t.Fatal("the fleet still reporting a minute after its tasks were RUNNING")
	}
	before := slotsOf(ctx, f)
	if slices.Max(before) == 0 {
		t.Fatalf("no agent learnt a place from the throttle (slots %v): nothing for the restart to keep", before)
	}
	if err := f.restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	// A place only a new agent's first burst taught, served at once, is not kept (no 429 proved
	// it: restarted, the agent is new again); every other comes back as it was.
	after, lost := slotsOf(ctx, f), 0
	for i := range after {
		if after[i] != before[i] {
			lost++
			if after[i] != 0 {
				lost = len(after)
			}
		}
	}
	if lost > len(after)/4 {
		t.Fatalf("slots (s) by agent after the restart %v; before it %v: the places the throttle taught were lost", after, before)
	}
	r, err := f.storm(ctx, arns, 0)
	if err != nil {
		t.Fatal(err)
	}
	issues, err := f.verify()
	if err != nil {
		t.Fatal(err)
	}
	if !r.Finished || r.SettledTwice != 0 || r.EarlyCleanups != 0 || r.Cleanups == 0 || issues != 0 {
		t.Errorf("the storm after the restart: finished %v, %d changes not settled exactly once, %d of %d cleanups early, %d journal findings",
			r.Finished, r.SettledTwice, r.EarlyCleanups, r.Cleanups, issues)
	}
}

// slotsOf is each agent's learnt slot in seconds, in the fleet's order.
func slotsOf(ctx context.Context, f *fleet) []float64 {
	out := make([]float64, len(f.agents))
	for i, a := range f.agents {
		_ = a.e.QueryWithReporting(ctx, func(_ *fsm.State, r engine.Reporting) { out[i] = r.PaceSeconds })
	}
	return out
}

// A scenario named wrong is refused before any agent starts, naming the flag and the name: a
// "restart-…" typo would otherwise have restarted the whole fleet before the bench noticed.
func TestAScenarioNamedWrongIsRefusedBeforeTheFleetStarts(t *testing.T) {
	for _, sc := range []string{"restart-foo", "storms", ""} {
		dir := t.TempDir()
		_, err := Fleet(context.Background(), FleetOptions{Agents: 1, Tasks: 1, RPS: 1, Burst: 1, Outage: time.Second,
			JournalDir: dir, Scenarios: []string{"storm", sc}})
		if err == nil || !strings.Contains(err.Error(), "--scenarios") || !strings.Contains(err.Error(), fmt.Sprintf("%q", sc)) {
			t.Fatalf("scenarios storm,%q: %v; want an error naming --scenarios and %q", sc, err, sc)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("scenario %q: %d agents' directories made before the refusal", sc, len(left))
		}
	}
}

// The ideal schedule's per-agent settle times, against which the bench prints the measured
// ones: the k-th agent served settles at (k − burst) ÷ rps at best, so p99 ÷ p50 is about 2
// for any schedule at the floor (a target of 1.5 cannot be met there).
func TestIdealAgentsSettleSpreadOverTheFloor(t *testing.T) {
	for _, c := range []struct {
		agents, changes, burst int
		rps, p50, p99          float64
	}{
		{200, 20, 20, 20, 4.05, 8.9},   // bench fleet's defaults: p99 ÷ p50 = 2.2
		{1000, 20, 50, 50, 9.02, 18.8}, // make bench-fleet
		{20, 6, 5, 10, 0.6, 1.5},
		{10, 20, 20, 20, 0, 0}, // the burst serves everyone at once
		{4, 150, 0, 1, 6, 8},   // two requests an agent
		{0, 20, 20, 20, 0, 0},  // no agents
		{200, 20, 20, 0, 0, 0}, // no rate: nothing to say, not a division by zero
	} {
		p50, p99 := idealAgents(c.agents, c.changes, c.burst, c.rps)
		if math.Abs(p50-c.p50) > 1e-9 || math.Abs(p99-c.p99) > 1e-9 {
			t.Errorf("idealAgents(%d agents, %d changes, burst %d, %g/s) = p50 %g, p99 %g; want %g, %g", c.agents, c.changes, c.burst, c.rps, p50, p99, c.p50, c.p99)
		}
	}
}

// The learnt slots counted per second show the schedule's holes as zeros, not skipped: a
// reader compares each second with the throttle's rate.
func TestSlotsPerSecondShowTheHoles(t *testing.T) {
	for _, c := range []struct {
		slots []float64
		want  string
	}{
		{[]float64{0, 0.1, 0.99, 1, 3.5}, " 3 1 0 1"},
		{[]float64{0, 0, 0}, " 3"}, // nothing learnt (the naive policy)
		{nil, ""},
	} {
		if got := perSecondOf(c.slots); got != c.want {
			t.Errorf("perSecondOf(%v) = %q; want %q", c.slots, got, c.want)
		}
	}
}

// A storm's stop comes only once the fleet has been quiet for its calm: the gate waits while
// state changes keep being answered, and gives up, saying so, when they never stop.
func TestTheStormWaitsForTheFleetToBeQuiet(t *testing.T) {
	g := &gate{}
	g.last = time.Now()
	began := time.Now()
	if !g.quiet(context.Background(), 200*time.Millisecond, 5*time.Second) {
		t.Fatal("not quiet though nothing was answered after the first")
	}
	if waited := time.Since(began); waited < 200*time.Millisecond {
		t.Fatalf("stopped %v after the last answer, before the calm of 200ms", waited)
	}
	g.last = time.Now().Add(time.Hour) // answered on and on: never quiet
	if g.quiet(context.Background(), 200*time.Millisecond, 300*time.Millisecond) {
		t.Fatal("quiet while the fleet was still reporting")
	}
	if !(&gate{}).quiet(context.Background(), time.Hour, time.Second) {
		t.Fatal("a fleet that never reported is not quiet")
	}
}

// A storm whose context ends while it waits for the fleet's calm returns the context's error,
// not "the fleet still reporting": an operator's ^C is not a finding about the fleet.
func TestAStormCancelledInItsCalmSaysSo(t *testing.T) {
	g := &gate{}
	g.last = time.Now() // the fleet has just reported: the calm is still to come
	f := &fleet{o: FleetOptions{RPS: 20, Burst: 20, Tasks: 10}, plane: &plane{g: g}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	_, err := f.storm(ctx, nil, 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("storm cancelled in its calm: %v; want %v", err, context.Canceled)
	}
	if waited := time.Since(began); waited >= f.calm() {
		t.Fatalf("returned %v after the cancel, not at once (the calm is %v)", waited, f.calm())
	}
}

// The host's best schedule is the ideal one when every host is ready at once, and never serves
// an agent before its host was ready nor faster than the bucket allows.
func TestHostBestIsTheIdealWhenEveryHostIsReady(t *testing.T) {
	cases := []struct {
		name           string
		ready          []float64
		last, p50, p99 float64
	}{
		{"200 ready at once", make([]float64, 200), 9.0, 4.05, 8.9},
		{"ready later than the tokens", []float64{0, 1, 2, 3}, 3, 2, 3},
		{"the bucket spent, then one a token", []float64{0, 0, 0, 0, 0}, 0.15, 0.05, 0.15},
	}
	for _, c := range cases {
		burst := 20
		if len(c.ready) < 20 {
			burst = 2
		}
		last, p50, p99 := hostBest(c.ready, burst, 20)
		if math.Abs(last-c.last) > 1e-9 || math.Abs(p50-c.p50) > 1e-9 || math.Abs(p99-c.p99) > 1e-9 {
			t.Errorf("%s: last %.3f p50 %.3f p99 %.3f; want %.3f %.3f %.3f", c.name, last, p50, p99, c.last, c.p50, c.p99)
		}
	}
	if ip50, ip99 := idealAgents(200, 20, 20, 20); math.Abs(ip50-4.05) > 1e-9 || math.Abs(ip99-8.9) > 1e-9 {
		t.Errorf("the ideal schedule: p50 %.3f p99 %.3f; want 4.05 and 8.9, as the host's best with every host ready", ip50, ip99)
	}
}

// checkTrace says the fleet's trace holds what its outages did, in order: each scenario's
// marks, reports answered 200 and 429 (with the Retry-After a turn names), polls, and the
// requests a hanging control plane held and cut at its return, each naming its agent.
func checkTrace(t *testing.T, trace, fleet string) {
	t.Helper()
	var order []string
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(trace), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || strings.Join(f[1:3], " ") != fleet {
			t.Fatalf("trace line %q: want <unix ms> %s <what> ...", line, fleet)
		}
		switch what := f[3]; {
		case what == "mark":
			order = append(order, strings.Join(f[4:], " "))
		case what == "report" && len(f) == 7 && f[5] == "429":
			seen["report 429 naming a turn"] = true
		case what == "report" && f[5] == "200", what == "poll" && f[5] == "200":
			seen[what+" 200"] = true
		case what == "held" && strings.HasPrefix(f[5], "agent-"):
			seen["held "+f[4]] = true
		}
	}
	want := "scenario outage-refused, down, exited, up, scenario outage-hanging, hang, exited, release"
	if got := strings.Join(order, ", "); got != want {
		t.Errorf("trace marks: %s; want %s", got, want)
	}
	for _, w := range []string{"report 200", "report 429 naming a turn", "poll 200", "held poll"} {
		if !seen[w] {
			t.Errorf("trace: no %s", w)
		}
	}
}
