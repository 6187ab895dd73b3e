// Command agentd is the host agent and its tools in one binary: the daemon (`run`), the
// one-process demo (`dev`), the reference control plane (`controlplane`), journal forensics
// (`journal …`) and benchmarks (`bench …`).
//
// Flags are parsed by kong: each flag of `run` is also an AGENTD_* environment variable, and a
// bad value exits non-zero with a message naming the flag.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type cli struct {
	Version      kong.VersionFlag `help:"Print the version and exit."`
	Run          runCmd           `cmd:"" help:"Run the agent daemon."`
	Dev          devCmd           `cmd:"" help:"Everything in one process for a first look: control plane, agent, simulated runtime, a demo workload."`
	Controlplane controlplaneCmd  `cmd:"" help:"Serve the reference control plane (development and tests)."`
	Bench        benchCmd         `cmd:"" help:"Measure agentd against its baselines, side by side."`
	Journal      journalCmd       `cmd:"" help:"Forensics on a journal: dump, replay, timeline, verify, stats, export."`
	Logs         logsCmd          `cmd:"" help:"A container's stdout and stderr, through a running agent's API."`
}

func main() {
	var c cli
	kctx := kong.Parse(&c,
		kong.Name("agentd"),
		kong.Description("agentd — a host agent that never cleans up a task before the control plane has acknowledged that it stopped."),
		kong.Vars{"version": version},
		kong.UsageOnError(),
	)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	kctx.BindTo(ctx, (*context.Context)(nil))
	err := kctx.Run()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentd:", err)
		os.Exit(1)
	}
}
