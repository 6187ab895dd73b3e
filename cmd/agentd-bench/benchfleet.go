package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/benchmark"
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
	RetryAfter []string      `name:"retry-after" default:"turn,next-token" help:"What the control plane's 429s name, a fleet each: turn (this client's turn; the reference control plane's default) or next-token (the bucket's next token, the same for all). The first is judged, every policy beside it; the others run agentd alone, printed beside."`
	JournalDir string        `help:"Directory for the agents' journals (a tmpfs for large fleets; default: the system's temp dir)."`
	JSON       bool          `name:"json" help:"Print one JSON object."`
}

func (b *benchFleetCmd) options() benchmark.FleetOptions {
	return benchmark.FleetOptions{Agents: b.Agents, Tasks: b.Tasks, RPS: b.RPS, Burst: b.Burst, Outage: b.Outage, Slow: b.Slow,
		JournalDir: b.JournalDir, Policies: b.Policy, Scenarios: b.Scenarios, RetryAfter: b.RetryAfter, Log: os.Stderr}
}

func (b *benchFleetCmd) Run(ctx context.Context) error {
	m, err := benchmark.MeasureMachine(b.JournalDir, 50)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "machine:", m)
	res, err := benchmark.Fleet(ctx, b.options())
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
	fmt.Printf("%-8s %-10s %-15s %8s %8s %7s %5s %9s %6s %7s %7s %7s %5s %5s %5s  %-22s  %s\n", "policy", "429 names", "scenario", "floor s", "settle s", "×floor", "done", "requests", "429 %", "p50 s", "p99 s", "max s", "herd", "early", "twice", "slot p10/p50/p90/max s", "ideal p50/p99 s")
	for _, r := range res.Rows {
		herd := "-"
		if strings.HasPrefix(r.Scenario, "outage") {
			herd = fmt.Sprintf("%.2f", r.Herd)
		}
		done := "yes"
		if !r.Finished {
			done = "NO"
		}
		fmt.Printf("%-8s %-10s %-15s %8.1f %8.1f %7.2f %5s %9d %6.0f %7.1f %7.1f %7.1f %5s %5d %5d  %-22s  %.1f/%.1f\n", r.Policy, r.RetryAfter, r.Scenario, r.FloorSeconds, r.Seconds, r.VsFloor, done,
			r.Requests, 100*r.ThrottledShare, r.AgentP50, r.AgentP99, r.AgentMax, herd, r.EarlyCleanups, r.SettledTwice,
			fmt.Sprintf("%.1f/%.1f/%.1f/%.1f", r.PaceP10, r.PaceP50, r.PaceP90, r.PaceMax), r.IdealP50, r.IdealP99)
	}
	fmt.Printf("per agent (agentd, tasks running): %.0f KB heap, %.1f goroutines (agent and control plane sides; the control plane's server %.1f); journal verify: %d findings\n",
		res.HeapPerAgent, res.GoroutinesPer, res.ServingPer, res.JournalIssues)
}

// fleetRows are the fleet's judged rows, the same in `bench fleet` and `bench all`: the
// agentd policy against the targets under the first Retry-After mode (the reference control
// plane's default, turn), the naive baseline beside; agentd under the other modes (next-token)
// in rows of their own, printed, not judged.
func fleetRows(res benchmark.FleetResult) []benchRow {
	judged := ""
	if len(res.Options.RetryAfter) > 0 {
		judged = res.Options.RetryAfter[0]
	}
	naive := map[string]benchmark.FleetRow{}
	var unkept *benchmark.FleetRow // restart's baseline: the same restart, the places not kept
	for _, r := range res.Rows {
		if r.Policy == "naive" {
			naive[r.Scenario] = r
		}
		if r.Policy == "agentd" && r.Scenario == "restart-unkept" && r.RetryAfter == judged {
			unkept = &r
		}
	}
	var rows []benchRow
	early := 0
	for _, r := range res.Rows {
		early += r.EarlyCleanups + r.SettledTwice
		if r.Policy != "agentd" {
			continue
		}
		if r.RetryAfter != judged {
			extra := fmt.Sprintf("%.0f%% of %d requests 429", 100*r.ThrottledShare, r.Requests)
			if strings.HasPrefix(r.Scenario, "outage") {
				extra += fmt.Sprintf(", herd %.2f", r.Herd)
			}
			rows = append(rows, benchRow{"fleet", fmt.Sprintf("%s, Retry-After naming the %s (not judged): settle ÷ floor", r.Scenario, r.RetryAfter), r.VsFloor, extra, 0, "-", true})
			continue
		}
		base := "-"
		if n, ok := naive[r.Scenario]; ok {
			base = fmt.Sprintf("naive %.2f×, %.0f%% 429", n.VsFloor, 100*n.ThrottledShare)
			if !n.Finished {
				base = fmt.Sprintf("naive > %.1f× (unfinished), %.0f%% 429", n.VsFloor, 100*n.ThrottledShare)
			}
		}
		name := fmt.Sprintf("%s: settle ÷ floor (%.1fs), %d agents, Retry-After naming the %s", r.Scenario, r.FloorSeconds, r.Agents, r.RetryAfter)
		switch {
		case r.Scenario == "restart-unkept":
			// Printed in restart's row, as its baseline.
		case r.Scenario == "restart":
			// A storm after the whole fleet restarted (an upgrade), judged by the storm's time
			// and 429 targets (its p99 rows are the storm's): met only if each agent kept its
			// place in the fleet through the restart. The same restart with the places taken
			// out of the journals is the baseline beside it.
			base := "-"
			if unkept != nil {
				base = fmt.Sprintf("places not kept: %.2f×, %.0f%% of %d requests 429", unkept.VsFloor, 100*unkept.ThrottledShare, unkept.Requests)
			}
			rows = append(rows,
				benchRow{"fleet", name + ", every agent restarted before it", r.VsFloor, base, 0, "≤ 1.25x", r.Finished && r.VsFloor <= 1.25},
				benchRow{"fleet", "restart: share of requests answered 429, %", 100 * r.ThrottledShare, fmt.Sprintf("%d requests; %s", r.Requests, base), 0, "≤ 25", r.ThrottledShare <= 0.25})
		case r.Scenario == "storm":
			rows = append(rows,
				benchRow{"fleet", name, r.VsFloor, base, 0, "≤ 1.25x", r.Finished && r.VsFloor <= 1.25},
				benchRow{"fleet", "storm: share of requests answered 429, %", 100 * r.ThrottledShare, fmt.Sprintf("%d requests", r.Requests), 0, "≤ 25", r.ThrottledShare <= 0.25},
				// The issue's target, judged as written, with the ideal schedule's ratio beside it:
				// about 2 at the floor for any schedule (README, At fleet scale), so it cannot be met
				// together with the floor. The restatement proposed there is the row after, judged
				// too, so nothing is lowered: both print, both count.
				benchRow{"fleet", "storm: per-agent settle p99 ÷ median", r.AgentP99 / math0(r.AgentP50),
					fmt.Sprintf("p50 %.1fs, p99 %.1fs, max %.1fs; ideal schedule %.2f (p50 %.1fs, p99 %.1fs)", r.AgentP50, r.AgentP99, r.AgentMax, r.IdealP99/math0(r.IdealP50), r.IdealP50, r.IdealP99),
					0, "≤ 1.5", r.AgentP99 <= 1.5*r.AgentP50},
				benchRow{"fleet", "storm: per-agent settle p99 ÷ the ideal schedule's p99 (proposed restatement)", r.AgentP99 / math0(r.IdealP99),
					fmt.Sprintf("ideal p99 %.1fs", r.IdealP99), 0, "≤ 1.5", r.AgentP99 <= 1.5*r.IdealP99})
		case strings.HasPrefix(r.Scenario, "outage"):
			rows = append(rows,
				benchRow{"fleet", name, r.VsFloor, base, 0, "≤ 1.5x", r.Finished && r.VsFloor <= 1.5},
				benchRow{"fleet", r.Scenario + ": herd factor (busiest 1 s of the first 30 s back ÷ rps)", r.Herd, "-", 0, "≤ 2", r.Herd <= 2})
		default:
			rows = append(rows, benchRow{"fleet", name + " (floor + answer time)", r.VsFloor, base, 0, "-", true})
		}
	}
	rows = append(rows, benchRow{"fleet", "early cleanups + changes not settled exactly once (every policy)", float64(early), fmt.Sprintf("journal verify findings %d", res.JournalIssues), 0, "0", early == 0 && res.JournalIssues == 0})
	rows = append(rows, benchRow{"fleet", "heap KB per agent (agent and control plane sides)", res.HeapPerAgent, fmt.Sprintf("%.1f goroutines per agent, the control plane's server %.1f", res.GoroutinesPer, res.ServingPer), 0, "-", true})
	return rows
}

func math0(v float64) float64 {
	if v == 0 {
		return 1
	}
	return v
}
