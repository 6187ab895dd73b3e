package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/posener/complete"
	"github.com/willabides/kongplete"

	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/journal"
)

// answerCompletion answers a shell's completion request (COMP_LINE set) and exits; otherwise it
// returns at once. Commands, subcommands and flags come from kong's model through kongplete;
// `--task` is completed with the task ARNs of the journal the command line points at.
func answerCompletion(parser *kong.Kong) {
	kongplete.Complete(parser, kongplete.WithPredictor("task", complete.PredictFunc(predictTasks)))
}

// predictTasks lists the ARNs of the tasks in the journal named by the words typed so far
// (--file, --data-dir, AGENTD_DATA_DIR, else the default data directory): live tasks and
// tombstones. A journal a running agent holds is read through --live when given; otherwise
// there is nothing to offer, and completion must never hang or print an error into the shell.
func predictTasks(a complete.Args) []string {
	src := forensics.Source{DataDir: defaultDataDir}
	if d := os.Getenv("AGENTD_DATA_DIR"); d != "" {
		src.DataDir = d
	}
	for i, w := range a.Completed {
		val, ok := "", false
		name := w
		if k, v, found := strings.Cut(w, "="); found {
			name, val, ok = k, v, true
		} else if i+1 < len(a.Completed) {
			val, ok = a.Completed[i+1], true
		}
		if !ok {
			continue
		}
		switch name {
		case "--file":
			src.File = val
		case "--data-dir":
			src.DataDir = val
		case "--live":
			src.Live = val
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var j *journal.Journal
	var closeJ func()
	var err error
	if src.Live == "" {
		// Not forensics.Open: its lock timeout and advice are for people, not for a shell.
		path := src.File
		if path == "" {
			path = src.DataDir + "/" + journal.FileName
		}
		if _, err := os.Stat(path); err != nil {
			return nil
		}
		j, err = journal.Open(path, journal.Options{ReadOnly: true, Timeout: 200 * time.Millisecond})
		closeJ = func() { j.Close() }
	} else {
		j, closeJ, err = forensics.Open(ctx, src)
	}
	if err != nil {
		return nil
	}
	defer closeJ()
	rep, err := forensics.Replay(j, 0)
	if err != nil || rep.State == nil {
		return nil
	}
	var arns []string
	for arn := range rep.State.Tasks {
		arns = append(arns, arn)
	}
	for arn := range rep.State.Tombstones {
		arns = append(arns, arn)
	}
	slices.Sort(arns)
	return complete.PredictSet(arns...).Predict(a)
}

// completionCmd prints the shell code that makes the shell ask agentd for completions (the
// scripts kongplete installs, written out for a named shell rather than the login shell).
type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"bash, zsh or fish."`
}

var completionScripts = map[string]string{
	"bash": "complete -o default -C %[1]q %[2]s\n",
	"zsh":  "autoload -U +X bashcompinit && bashcompinit\ncomplete -o default -C %[1]q %[2]s\n",
	"fish": `function __complete_%[2]s
    set -lx COMP_LINE (commandline -cp)
    test -z (commandline -ct)
    and set COMP_LINE "$COMP_LINE "
    %[1]q
end
complete -f -c %[2]s -a "(__complete_%[2]s)"
`,
}

func (c *completionCmd) Run(kctx *kong.Context) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("completion: where is this binary? %w", err)
	}
	_, err = fmt.Fprintf(kctx.Stdout, completionScripts[c.Shell], bin, kctx.Model.Name)
	return err
}
