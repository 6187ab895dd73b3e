// Command agentd is the host agent and its tools in one binary: the daemon (`run`), the
// one-process demo (`dev`), the reference control plane (`controlplane`), journal forensics
// (`journal …`), and what an operator installs it with (`version`, `install-unit`,
// `completion`). The benchmarks are a binary of their own (cmd/agentd-bench), so the daemon
// links none of them.
//
// Flags are parsed by kong: each flag of `run` is also an AGENTD_* environment variable and a
// key of the settings file (config.go), and a bad value exits non-zero with a message naming
// the flag, or the file and the key.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
)

type cli struct {
	Version      kong.VersionFlag `help:"Print the version and exit."`
	Run          runCmd           `cmd:"" help:"Run the agent daemon."`
	Dev          devCmd           `cmd:"" help:"Everything in one process for a first look: control plane, agent, simulated runtime, a demo workload."`
	Controlplane controlplaneCmd  `cmd:"" help:"Serve the reference control plane (development and tests)."`
	Journal      journalCmd       `cmd:"" help:"Forensics on a journal: dump, replay, timeline, verify, stats, export."`
	Logs         logsCmd          `cmd:"" help:"A container's stdout and stderr, through a running agent's API."`
	VersionCmd   versionCmd       `cmd:"" name:"version" help:"Print the version, commit and build date (--json too)."`
	InstallUnit  installUnitCmd   `cmd:"" help:"Write the systemd unit (agentd.service) that ships with this binary."`
	Completion   completionCmd    `cmd:"" help:"Print shell completion for bash, zsh or fish (task ARNs for --task come from the journal)."`
}

// newParser builds the command line: one place, so tests parse exactly what main parses.
func newParser(c *cli, opts ...kong.Option) (*kong.Kong, error) {
	return kong.New(c, append([]kong.Option{
		kong.Name("agentd"),
		kong.Description("agentd — a host agent that never cleans up a task before the control plane has acknowledged that it stopped."),
		kong.Vars{"version": buildVersion().String()},
		kong.Configuration(loadConfigFile), // the loader only: `run` chooses the file (config.go)
		kong.UsageOnError(),
	}, opts...)...)
}

func main() {
	var c cli
	parser, err := newParser(&c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentd:", err)
		os.Exit(2)
	}
	answerCompletion(parser) // answers the shell's completion requests, then exits
	kctx, err := parser.Parse(os.Args[1:])
	parser.FatalIfErrorf(err)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	kctx.BindTo(ctx, (*context.Context)(nil))
	err = kctx.Run()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentd:", err)
		os.Exit(1)
	}
}
