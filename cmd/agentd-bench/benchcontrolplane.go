package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/agentd/agentd/internal/benchmark"
)

type benchCPCmd struct {
	Agents int  `default:"1000" help:"Agents, each holding a long poll (raw HTTP clients in this process, one connection each)."`
	Tasks  int  `default:"3" help:"Tasks each agent is given, has delivered, acknowledges and reports RUNNING before its long poll (0 to 50)."`
	JSON   bool `name:"json" help:"Print one JSON object."`
}

func (b *benchCPCmd) Run(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	res, err := benchmark.ControlPlane(ctx, benchmark.ControlPlaneOptions{Server: self, Agents: b.Agents, Tasks: b.Tasks})
	if err != nil {
		return err
	}
	if b.JSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("control plane (the reference control plane in a child process): %d agents each holding a long poll, %d tasks each delivered, acknowledged and reported RUNNING first (setup %.1f s)\n",
		res.Agents, res.Tasks, res.SetupSeconds)
	fmt.Printf("RSS: fresh %.1f MB, with every poll held %.1f MB (peak %.1f MB): %.1f KB per agent (live Go heap %.1f KB of it)\n",
		kbToMB(res.FreshRSSKB), kbToMB(res.HeldRSSKB), kbToMB(res.PeakRSSKB), res.RSSPerAgentKB, res.HeapPerAgentKB)
	fmt.Printf("goroutines: fresh %d, with every poll held %d: %.2f per agent\n", res.FreshGoroutines, res.HeldGoroutines, res.GoroutinesPerAgent)
	fmt.Println()
	return printRows(controlplaneRows(res))
}

// controlplaneRows are the control plane benchmark's rows, the same in `bench controlplane`
// and `bench all`: printed, not judged (issue 24 sets no target).
func controlplaneRows(r benchmark.ControlPlaneResult) []benchRow {
	return []benchRow{
		{"controlplane", fmt.Sprintf("RSS KB per long-polling agent, %d agents × %d tasks", r.Agents, r.Tasks), r.RSSPerAgentKB,
			fmt.Sprintf("fresh control plane %.1f MB; %.1f MB held, peak %.1f", kbToMB(r.FreshRSSKB), kbToMB(r.HeldRSSKB), kbToMB(r.PeakRSSKB)), 0, "-", true},
		{"controlplane", "goroutines per long-polling agent", r.GoroutinesPerAgent,
			fmt.Sprintf("fresh control plane %d", r.FreshGoroutines), 0, "-", true},
	}
}

// runControlplaneBench is `bench all`'s row: the default fleet of 1,000 agents (seconds).
func runControlplaneBench(ctx context.Context, server string) ([]benchRow, error) {
	res, err := benchmark.ControlPlane(ctx, benchmark.ControlPlaneOptions{Server: server, Agents: 1000, Tasks: 3})
	if err != nil {
		return nil, err
	}
	return controlplaneRows(res), nil
}

func kbToMB(kb int64) float64 { return float64(kb) * 1024 / 1e6 }
