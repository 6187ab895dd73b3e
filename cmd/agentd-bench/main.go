// Command agentd-bench is agentd's laboratory: every benchmark, each measured against its
// baseline side by side (`agentd-bench all` prints one table: figure, baseline, ratio, target,
// pass/fail). It is a binary of its own so that the daemon hosts run links none of it — no
// benchmark, no test server, no measurement API (`go list -deps ./cmd/agentd` says so, and
// cmd/agentd's TestTheDaemonLinksNoLab checks it).
//
// The benches that measure a whole agent process run the agentd binary as a child: --agentd,
// else the agentd beside this binary (make bench builds both into bin/), else agentd on PATH.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/agentd/agentd/internal/benchmark"
)

type cli struct {
	Journal      benchJournalCmd   `cmd:"" help:"Qualify a disk for the journal: one commit per event vs DB.Batch vs group commit."`
	Throttled    benchThrottledCmd `cmd:"" help:"Settle a backlog of state changes against a control plane throttled to --rps."`
	Waiting      benchWaitingCmd   `cmd:"" help:"What tasks stopped and awaiting acknowledgement cost, and how soon cleanup follows the ack."`
	Lifecycle    benchLifecycleCmd `cmd:"" help:"Full task lifecycles through a real agent and an unthrottled in-process control plane."`
	Recovery     benchRecoveryCmd  `cmd:"" help:"Open → projection rebuilt → ready, on journals of growing size with 10k live tasks; with snapshots and without."`
	Docker       benchDockerCmd    `cmd:"" help:"Task lifecycles on the Docker Engine through agentd, beside a bare moby-client loop doing the same."`
	RSS          benchRSSCmd       `cmd:"" name:"rss" help:"The agent's own RSS (a child agentd on the simulated runtime): peak in a burst of tasks vs steady after, and at rest with many remembered tasks beside a fresh agent."`
	Fleet        benchFleetCmd     `cmd:"" help:"N whole agents in one process against one throttled control plane: storm, slow control plane, outages; the naive policy beside."`
	CP           benchCPCmd        `cmd:"" name:"controlplane" help:"The reference control plane (a child process) with N agents each holding a long poll: its RSS and goroutines per agent."`
	All          benchAllCmd       `cmd:"" help:"Every benchmark, one table: figure, baseline, ratio, target, pass/fail."`
	ServeCP      serveCPCmd        `cmd:"" name:"serve-controlplane" hidden:"" help:"The control plane bench's child: the reference control plane and GET /v1/runtime."`
	FleetAgent   fleetAgentCmd     `cmd:"" name:"fleet-agent" hidden:"" help:"One agent of bench fleet --processes: runs until SIGTERM, then verifies its journal."`
	AgentdBinary string            `name:"agentd" help:"The agentd binary the benches run as a child (default: the one beside this binary, else on PATH); another build, to compare."`
}

func main() {
	var c cli
	kctx := kong.Parse(&c, kong.Name("agentd-bench"),
		kong.Description("agentd-bench — agentd's benchmarks, each against its baseline, side by side."), kong.UsageOnError())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.Bind(agentdFlag(c.AgentdBinary))
	err := kctx.Run()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentd-bench:", err)
		os.Exit(1)
	}
}

// agentdFlag is --agentd as the commands receive it.
type agentdFlag string

// path is the agentd binary to run: the flag's, else agentd beside this binary, else on PATH;
// an error names the flag when there is none.
func (f agentdFlag) path() (string, error) {
	if f != "" {
		return string(f), nil
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "agentd")
		if fi, err := os.Stat(beside); err == nil && !fi.IsDir() {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("agentd"); err == nil {
		return p, nil
	}
	return "", errors.New("--agentd: no agentd binary beside agentd-bench or on PATH (make bench builds both into bin/)")
}

// serveCPCmd is the control plane bench's child (benchmark.ServeControlPlane).
type serveCPCmd struct {
	Listen string `default:"127.0.0.1:0" help:"Address to serve on."`
}

func (s *serveCPCmd) Run(ctx context.Context) error {
	return benchmark.ServeControlPlane(ctx, s.Listen, os.Stderr)
}
