package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/benchmark"
	"github.com/agentd/agentd/internal/controlplane"
)

type benchFleetCmd struct {
	Agents     int           `default:"200" help:"Agents in the fleet, each a whole agent (engine, journal, HTTP client, id) in this process."`
	Tasks      int           `default:"10" help:"Tasks each agent runs in each scenario."`
	RPS        float64       `name:"rps" default:"20" help:"The control plane's fleet-wide throttle on state-change requests, per second."`
	Burst      int           `default:"20" help:"The throttle's bucket size."`
	Outage     time.Duration `default:"60s" help:"How long the control plane answers nothing in the outage scenarios."`
	Slow       time.Duration `default:"2s" help:"How long every answer takes in the slow scenario."`
	Policy     []string      `default:"agentd,naive" help:"Submitter policies, side by side: agentd, and naive (one change a request, a retry every second, no jitter, Retry-After ignored)."`
	Scenarios  []string      `default:"storm,slow,outage-refused,outage-hanging,restart,restart-unkept" help:"Scenarios to run, in order (restart: a storm after every agent stopped cleanly and started again over its journal, an upgrade; restart-unkept: the same with each agent's kept place taken out of its journal, restart's baseline)."`
	RetryAfter []string      `name:"retry-after" default:"turn,next-token,none" help:"What the control plane's 429s name, a fleet each, every policy under each, each judged: turn (this client's turn; the reference control plane's default), next-token (the bucket's next token, the same for all) or none (no Retry-After header)."`
	Processes  bool          `help:"Run each agent as a process of its own (this binary, fleet-agent), so a busy host's scheduling delays are part of the measure (the in-process fleet is the default, for speed)."`
	JournalDir string        `help:"Directory for the agents' journals (a tmpfs for large fleets; default: the system's temp dir)."`
	JSON       bool          `name:"json" help:"Print one JSON object."`
	Trace      string        `help:"Write to this file one line per request the control plane saw (which agent, its answer) and per moment of each scenario, to find why a row missed (internal/benchmark/fleettrace.go)."`
}

func (b *benchFleetCmd) options() benchmark.FleetOptions {
	return benchmark.FleetOptions{Agents: b.Agents, Tasks: b.Tasks, RPS: b.RPS, Burst: b.Burst, Outage: b.Outage, Slow: b.Slow,
		JournalDir: b.JournalDir, Policies: b.Policy, Scenarios: b.Scenarios, RetryAfter: b.RetryAfter, Processes: b.Processes, Self: self(), Log: os.Stderr}
}

// self is this binary, which runs a fleet's agents as processes ("": not found; Fleet then
// names --processes).
func self() string {
	p, _ := os.Executable()
	return p
}

// fleetAgentCmd is one agent of a fleet run as processes (benchmark.RunFleetAgent).
type fleetAgentCmd struct {
	Backend string `required:"" help:"The control plane's URL."`
	AgentID string `name:"agent-id" required:"" help:"The agent's id."`
	Dir     string `required:"" help:"The agent's journal and simulated containers."`
	Naive   bool   `help:"The naive policy."`
}

func (c *fleetAgentCmd) Run(ctx context.Context) error {
	return benchmark.RunFleetAgent(ctx, benchmark.FleetAgentOptions{Backend: c.Backend, AgentID: c.AgentID, Dir: c.Dir, Naive: c.Naive}, os.Stdout)
}

func (b *benchFleetCmd) Run(ctx context.Context) error {
	m, err := benchmark.MeasureMachine(b.JournalDir, 50)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "machine:", m)
	o := b.options()
	if b.Trace != "" {
		f, err := os.Create(b.Trace)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		defer f.Close()
		w := bufio.NewWriter(f)
		defer w.Flush()
		o.Trace = w
	}
	res, err := benchmark.Fleet(ctx, o)
	if err != nil {
		return err
	}
	rows := fleetRows(res)
	if b.JSON {
		if err := json.NewEncoder(os.Stdout).Encode(struct {
			Machine benchmark.Machine     `json:"machine"`
			Fleet   benchmark.FleetResult `json:"fleet"`
			Rows    []benchRow            `json:"rows"`
		}{m, res, rows}); err != nil {
			return err
		}
		return failed(rows)
	}
	fmt.Println("machine:", m)
	printFleet(res)
	fmt.Println()
	return printRows(rows)
}

// printFleet is the fleet's own table: one row a scenario and policy, side by side.
func printFleet(res benchmark.FleetResult) {
	o := res.Options
	fmt.Printf("fleet: %d agents × %d tasks, one control plane throttled to %g req/s (burst %d), outage %v, journals on %s (%s)\n",
		o.Agents, o.Tasks, o.RPS, o.Burst, o.Outage, res.JournalDir, res.JournalFS)
	fmt.Printf("%-8s %-10s %-15s %8s %8s %7s %5s %9s %6s %7s %7s %7s %5s %5s %5s  %-22s  %-15s  %s\n", "policy", "429 names", "scenario", "floor s", "settle s", "×floor", "done", "requests", "429 %", "p50 s", "p99 s", "max s", "herd", "early", "twice", "slot p10/p50/p90/max s", "ideal p50/p99 s", "host's best s/p50/p99")
	for _, r := range res.Rows {
		herd := "-"
		if strings.HasPrefix(r.Scenario, "outage") {
			herd = fmt.Sprintf("%.2f", r.Herd)
		}
		done := "yes"
		if !r.Finished {
			done = "NO"
		}
		best := "-"
		if r.HostBest > 0 {
			best = fmt.Sprintf("%.1f/%.1f/%.1f", r.HostBest, r.HostBestP50, r.HostBestP99)
		}
		fmt.Printf("%-8s %-10s %-15s %8.1f %8.1f %7.2f %5s %9d %6.0f %7.1f %7.1f %7.1f %5s %5d %5d  %-22s  %-15s  %s\n", r.Policy, r.RetryAfter, r.Scenario, r.FloorSeconds, r.Seconds, r.VsFloor, done,
			r.Requests, 100*r.ThrottledShare, r.AgentP50, r.AgentP99, r.AgentMax, herd, r.EarlyCleanups, r.SettledTwice,
			fmt.Sprintf("%.1f/%.1f/%.1f/%.1f", r.PaceP10, r.PaceP50, r.PaceP90, r.PaceMax), fmt.Sprintf("%.1f/%.1f", r.IdealP50, r.IdealP99), best)
	}
	if o.Processes {
		fmt.Printf("agents as processes of their own; journal verify (each process, at its clean stop): %d findings\n", res.JournalIssues)
		return
	}
	fmt.Printf("per agent (agentd, tasks running): %.0f KB heap, %.1f goroutines (agent and control plane sides; the control plane's server %.1f); journal verify: %d findings\n",
		res.HeapPerAgent, res.GoroutinesPer, res.ServingPer, res.JournalIssues)
}

// fleetRows are the fleet's judged rows, the same in `bench fleet` and `bench all`: the agentd
// policy against the targets under every Retry-After mode the run played (turn, next-token,
// none: one throttle kind each), the naive baseline beside it under the same mode. A fleet run
// as processes (--processes) is judged on the storm's 429s alone, for turn and next-token (the
// issue's target for a busy host); its other figures print.
func fleetRows(res benchmark.FleetResult) []benchRow {
	type key struct{ mode, scenario string }
	naive := map[key]benchmark.FleetRow{}
	unkept := map[string]benchmark.FleetRow{} // restart's baseline, by mode: the same restart, the places not kept
	for _, r := range res.Rows {
		if r.Policy == "naive" {
			naive[key{r.RetryAfter, r.Scenario}] = r
		}
		if r.Policy == "agentd" && r.Scenario == "restart-unkept" {
			unkept[r.RetryAfter] = r
		}
	}
	bench := "fleet"
	if res.Options.Processes {
		bench = "fleet-procs"
	}
	var rows []benchRow
	early := 0
	for _, r := range res.Rows {
		early += r.EarlyCleanups + r.SettledTwice
		if r.Policy != "agentd" || r.Scenario == "restart-unkept" {
			continue // restart-unkept prints in restart's row, as its baseline
		}
		base := "-"
		if n, ok := naive[key{r.RetryAfter, r.Scenario}]; ok {
			base = fmt.Sprintf("naive %.2f×, %.0f%% 429", n.VsFloor, 100*n.ThrottledShare)
			if !n.Finished {
				base = fmt.Sprintf("naive > %.1f× (unfinished), %.0f%% 429", n.VsFloor, 100*n.ThrottledShare)
			}
		}
		kind := fmt.Sprintf("[%s] %s", r.RetryAfter, r.Scenario)
		if r.HostBest > 0 {
			// What no policy could beat on this host as loaded (benchmark.hostBest): where it is
			// over a target, the target was out of reach in this run.
			base += fmt.Sprintf("; host's best %.2f×", r.HostBest/math0(r.FloorSeconds))
		}
		name := fmt.Sprintf("%s: settle ÷ floor (%.1fs), %d agents", kind, r.FloorSeconds, r.Agents)
		share := benchRow{bench, kind + ": share of requests answered 429, %", 100 * r.ThrottledShare, fmt.Sprintf("%d requests", r.Requests), 0, "≤ 25", r.ThrottledShare <= 0.25}
		switch {
		case res.Options.Processes:
			if r.Scenario == "storm" && r.RetryAfter != controlplane.RetryAfterNone {
				rows = append(rows, share)
			} else {
				share.Target, share.Pass = "-", true
				rows = append(rows, share)
			}
			rows = append(rows, benchRow{bench, name + " (agents as processes)", r.VsFloor, base, 0, "-", r.Finished})
		case r.Scenario == "restart":
			// A storm after the whole fleet restarted (an upgrade), judged by the storm's time
			// and 429 targets: met only if each agent kept its place in the fleet through the
			// restart. The same restart with the places taken out of the journals is beside it.
			if u, ok := unkept[r.RetryAfter]; ok {
				base = fmt.Sprintf("places not kept: %.2f×, %.0f%% of %d requests 429", u.VsFloor, 100*u.ThrottledShare, u.Requests)
			}
			share.Baseline = fmt.Sprintf("%d requests; %s", r.Requests, base)
			rows = append(rows, benchRow{bench, name + ", every agent restarted before it", r.VsFloor, base, 0, "≤ 1.25x", r.Finished && r.VsFloor <= 1.25}, share)
		case r.Scenario == "storm":
			// Per agent, against the ideal schedule's own percentiles (idealAgents): even the
			// ideal spreads the agents over the floor, p99 ÷ p50 about 2.2, so each agent is
			// judged by how far it falls behind its place in the best schedule.
			rows = append(rows,
				benchRow{bench, name, r.VsFloor, base, 0, "≤ 1.25x", r.Finished && r.VsFloor <= 1.25},
				share,
				benchRow{bench, kind + ": per-agent settle p50 ÷ the ideal schedule's", r.AgentP50 / math0(r.IdealP50),
					fmt.Sprintf("p50 %.1fs; ideal %.1fs, host's best %.1fs", r.AgentP50, r.IdealP50, r.HostBestP50), 0, "≤ 1.5", r.AgentP50 <= 1.5*r.IdealP50},
				benchRow{bench, kind + ": per-agent settle p99 ÷ the ideal schedule's", r.AgentP99 / math0(r.IdealP99),
					fmt.Sprintf("p99 %.1fs, max %.1fs; ideal %.1fs, host's best %.1fs", r.AgentP99, r.AgentMax, r.IdealP99, r.HostBestP99), 0, "≤ 1.25", r.AgentP99 <= 1.25*r.IdealP99})
		case strings.HasPrefix(r.Scenario, "outage"):
			rows = append(rows,
				benchRow{bench, name, r.VsFloor, base, 0, "≤ 1.5x", r.Finished && r.VsFloor <= 1.5},
				benchRow{bench, kind + ": herd factor (busiest 1 s of the first 30 s back ÷ rps)", r.Herd, fmt.Sprintf("%.0f%% of %d requests 429", 100*r.ThrottledShare, r.Requests), 0, "≤ 2", r.Herd <= 2})
		default:
			rows = append(rows, benchRow{bench, name + " (floor + answer time)", r.VsFloor, base, 0, "-", true})
		}
	}
	rows = append(rows, benchRow{bench, "early cleanups + changes not settled exactly once (every policy)", float64(early), fmt.Sprintf("journal verify findings %d", res.JournalIssues), 0, "0", early == 0 && res.JournalIssues == 0})
	if !res.Options.Processes {
		rows = append(rows, benchRow{bench, "heap KB per agent (agent and control plane sides)", res.HeapPerAgent, fmt.Sprintf("%.1f goroutines per agent, the control plane's server %.1f", res.GoroutinesPer, res.ServingPer), 0, "-", true})
	}
	return rows
}

func math0(v float64) float64 {
	if v == 0 {
		return 1
	}
	return v
}
