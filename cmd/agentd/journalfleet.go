package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/agentd/agentd/internal/forensics"
)

// fleet prints one task's records from several hosts' files, merged by time, each line naming
// its host.
func (d *journalDumpCmd) fleet(ctx context.Context, f forensics.Filter) error {
	if d.Task == "" {
		return errors.New("several files are merged for one task: add --task ARN")
	}
	if d.Unseal || d.Follow || d.Live != "" {
		return errors.New("--unseal, --follow and --live read one agent's journal: not with several files")
	}
	files, closeAll, err := forensics.OpenHostFiles(ctx, d.Files, warnOnStderr)
	if err != nil {
		return err
	}
	defer closeAll()
	entries, err := forensics.TaskEntries(files, d.Task, warnOnStderr)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	for _, e := range entries {
		if (!f.Since.IsZero() && e.Time.Before(f.Since)) || (!f.Until.IsZero() && e.Time.After(f.Until)) {
			continue
		}
		if d.JSON {
			if err := enc.Encode(e); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(w, forensics.EntryLine(e))
	}
	return nil
}

type journalImportOTLPCmd struct {
	File string `arg:"" type:"existingfile" help:"The Collector's file exporter output (OTLP/JSON, one request a line)."`
	Out  string `help:"Write the export here (default: standard output)." type:"path"`
}

func (c *journalImportOTLPCmd) Run() error {
	in, err := os.Open(c.File)
	if err != nil {
		return err
	}
	defer in.Close()
	var out io.Writer = os.Stdout
	var file *os.File
	if c.Out != "" {
		if file, err = os.OpenFile(c.Out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		out = file
	}
	bw := bufio.NewWriter(out)
	n, err := forensics.ImportOTLP(in, bw, warnOnStderr)
	if err == nil {
		err = bw.Flush()
	}
	if file != nil {
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(c.Out)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", c.File, err)
	}
	fmt.Fprintf(os.Stderr, "%d records imported\n", n)
	return nil
}

// warnOnStderr tells the operator of what the forensics commands found wrong in their input
// (conflicting records, a file given twice) beside the answer, not in it.
func warnOnStderr(s string) { fmt.Fprintln(os.Stderr, "warning: "+s) }
