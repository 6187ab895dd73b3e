package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/fsm"
)

type journalCmd struct {
	Dump     journalDumpCmd     `cmd:"" help:"Print the records, filtered."`
	Replay   journalReplayCmd   `cmd:"" help:"What the agent believed after record N or at a time: every task's known / desired / sent status."`
	Timeline journalTimelineCmd `cmd:"" help:"One task's life: transitions, reports, the stopped-acked event, cleanup, durations (--svg draws it)."`
	Verify   journalVerifyCmd   `cmd:"" help:"Check every checksum, the sequence, and every invariant; exit 1 on any problem."`
	Stats    journalStatsCmd    `cmd:"" help:"Records by type, tasks, oldest unsent change, bytes per record, snapshots and compaction."`
	Export   journalExportCmd   `cmd:"" help:"A consistent copy of a journal, also of one a running agent holds (--live)."`

	ImportOTLP journalImportOTLPCmd `cmd:"" name:"import-otlp" help:"Turn the journal records a log pipeline received as OTLP (the Collector's file/JSON output) into an export dump and timeline read, one record once."`
}

// journalSource selects the journal every subcommand reads.
type journalSource struct {
	DataDir  string `default:"/var/lib/agentd" env:"AGENTD_DATA_DIR" help:"Data directory of the agent (its journal.db)."`
	File     string `help:"A bare journal file (overrides --data-dir)."`
	Live     string `help:"Read a running agent's journal through its introspection API (e.g. http://127.0.0.1:51678, or unix:/run/agentd/api.sock)."`
	APIToken string `name:"api-token-file" env:"AGENTD_API_TOKEN_FILE" help:"Bearer token file of an agent whose API requires one (with --live)."`
	JSON     bool   `name:"json" help:"JSON output: one object per line for streams, one object for summaries."`
}

func (s journalSource) source() forensics.Source {
	return forensics.Source{DataDir: s.DataDir, File: s.File, Live: s.Live, TokenFile: s.APIToken}
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type journalDumpCmd struct {
	journalSource
	Task    string   `predictor:"task" help:"Only records of this task."`
	Type    string   `help:"Only records of these types (comma-separated wire names)."`
	FromSeq uint64   `help:"From this sequence number."`
	ToSeq   uint64   `help:"Up to this sequence number."`
	Since   string   `help:"From this time (RFC 3339, or relative like -2h)."`
	Until   string   `help:"Up to this time (RFC 3339, or relative like -10m)."`
	Follow  bool     `help:"Keep printing new records as the running agent appends them (needs --live)."`
	Unseal  bool     `help:"Show env values in the clear, opened with the seal key of --data-dir (only on the agent's own host; the key is never exported)."`
	Files   []string `arg:"" optional:"" type:"existingfile" help:"Several hosts' journals, journal export copies or import-otlp exports: one task's records (--task) merged by time, each line naming its host."`
}

func (d *journalDumpCmd) filter() (forensics.Filter, error) {
	f := forensics.Filter{Task: d.Task, FromSeq: d.FromSeq, ToSeq: d.ToSeq}
	var err error
	if f.Types, err = forensics.ParseTypes(d.Type); err != nil {
		return f, fmt.Errorf("--type %w", err)
	}
	now := time.Now()
	if f.Since, err = forensics.ParseTime(d.Since, now); err != nil {
		return f, fmt.Errorf("--since %w", err)
	}
	if f.Until, err = forensics.ParseTime(d.Until, now); err != nil {
		return f, fmt.Errorf("--until %w", err)
	}
	return f, nil
}

func (d *journalDumpCmd) Run(ctx context.Context) error {
	f, err := d.filter()
	if err != nil {
		return err
	}
	if len(d.Files) > 0 {
		return d.fleet(ctx, f)
	}
	if d.Follow {
		if d.Live == "" {
			return errors.New("--follow reads a running agent's new records through its API: add --live http://127.0.0.1:51678 (its --listen address)")
		}
		return d.follow(ctx, f)
	}
	if d.Unseal {
		if f.Reveal, err = unsealer(d.journalSource); err != nil {
			return err
		}
	}
	j, closeJ, err := forensics.Open(ctx, d.source())
	if err != nil {
		return err
	}
	defer closeJ()
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	_, err = forensics.Dump(w, j, f, d.JSON)
	return err
}

// follow long-polls the agent's /v1/journal/records and prints what passes the filter.
func (d *journalDumpCmd) follow(ctx context.Context, f forensics.Filter) error {
	next := max(f.FromSeq, 1)
	client, base := forensics.APIClient(d.Live)
	for ctx.Err() == nil {
		u := fmt.Sprintf("%s/v1/journal/records?from=%d&wait=25", base, next)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err := d.source().Authorize(req); err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("--live %s: %w", d.Live, err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			rec, err := recordFromJSON(sc.Bytes())
			if err != nil {
				resp.Body.Close()
				return fmt.Errorf("--live %s: %w", d.Live, err)
			}
			next = rec.Seq + 1
			if !f.Match(rec) {
				continue
			}
			if d.JSON {
				fmt.Println(sc.Text())
			} else {
				fmt.Println(forensics.Line(rec))
			}
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("--live %s: HTTP %d", d.Live, resp.StatusCode)
		}
	}
	return nil
}

func recordFromJSON(b []byte) (event.Record, error) {
	var head struct {
		Seq       uint64    `json:"seq"`
		Time      time.Time `json:"time"`
		Type      string    `json:"type"`
		Task      string    `json:"task_arn"`
		Container string    `json:"container"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return event.Record{}, err
	}
	t, ok := event.ParseType(head.Type)
	if !ok {
		return event.Record{}, fmt.Errorf("record %d: unknown type %q", head.Seq, head.Type)
	}
	e, err := event.UnmarshalBody(t, b)
	if err != nil {
		return event.Record{}, fmt.Errorf("record %d: %w", head.Seq, err)
	}
	return event.Record{Seq: head.Seq, Time: head.Time, Task: head.Task, Container: head.Container, Event: e}, nil
}

type journalReplayCmd struct {
	journalSource
	ToSeq       uint64        `help:"Replay up to this sequence number (default: the end)."`
	At          string        `help:"Replay up to this time (RFC 3339 or relative like -2h)."`
	Task        string        `predictor:"task" help:"Show this task only."`
	CleanupWait time.Duration `default:"3h" help:"The agent's --cleanup-wait, to show when cleanups fall due (it is not journaled)."`
}

func (r *journalReplayCmd) Run(ctx context.Context) error {
	if r.ToSeq != 0 && r.At != "" {
		return errors.New("--to-seq and --at: give one")
	}
	j, closeJ, err := forensics.Open(ctx, r.source())
	if err != nil {
		return err
	}
	defer closeJ()
	var rep forensics.Replayed
	if r.At != "" {
		at, err := forensics.ParseTime(r.At, time.Now())
		if err != nil {
			return fmt.Errorf("--at %w", err)
		}
		rep, err = forensics.ReplayAt(j, at)
		if err != nil {
			return err
		}
	} else if rep, err = forensics.Replay(j, r.ToSeq); err != nil {
		return err
	}
	cfg := fsm.Config{CleanupWait: r.CleanupWait}
	st := rep.State
	if r.Task != "" {
		t, ok := st.Tasks[r.Task]
		if !ok {
			if ts, ok := st.Tombstones[r.Task]; ok {
				if r.JSON {
					return printJSON(ts)
				}
				fmt.Printf("task %s: CLEANED at %s (tombstone)\n", r.Task, ts.CleanedAt().Format(time.RFC3339Nano))
				return nil
			}
			return fmt.Errorf("--task %s: not known at record %d", r.Task, rep.Seq)
		}
		if r.JSON {
			return printJSON(t)
		}
		fmt.Print(st.FormatTask(t, rep.At, cfg))
		return nil
	}
	if r.JSON {
		return printJSON(map[string]any{"seq": rep.Seq, "time": rep.At, "from_snapshot": rep.FromSnap, "state": st})
	}
	fmt.Printf("replayed to record %d (from snapshot at %d)\n", rep.Seq, rep.FromSnap)
	fmt.Print(st.Format(rep.At, cfg))
	return nil
}

type journalTimelineCmd struct {
	journalSource
	Task  string   `required:"" predictor:"task" help:"The task."`
	SVG   string   `name:"svg" help:"Also draw the timeline into this SVG file."`
	Files []string `arg:"" optional:"" type:"existingfile" help:"Several hosts' journals, journal export copies or import-otlp exports: the task's life across hosts, merged by time (the SVG draws one lane per host)."`
}

func (c *journalTimelineCmd) Run(ctx context.Context) error {
	var tl *forensics.Timeline
	if len(c.Files) > 0 {
		files, closeAll, err := forensics.OpenHostFiles(ctx, c.Files, warnOnStderr)
		if err != nil {
			return err
		}
		defer closeAll()
		if tl, err = forensics.FleetTimeline(files, c.Task, warnOnStderr); err != nil {
			return err
		}
	} else {
		j, closeJ, err := forensics.Open(ctx, c.source())
		if err != nil {
			return err
		}
		defer closeJ()
		if tl, err = forensics.BuildTimeline(j, c.Task); err != nil {
			return err
		}
	}
	if c.SVG != "" {
		f, err := os.Create(c.SVG)
		if err != nil {
			return fmt.Errorf("--svg %s: %w", c.SVG, err)
		}
		if err := tl.WriteSVG(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if c.JSON {
		return printJSON(tl)
	}
	tl.WriteText(os.Stdout)
	return nil
}

type journalVerifyCmd struct {
	journalSource
	Model bool `help:"Also check the records against the independent model of the protocol (internal/model): each violation named by record and rule; exit 1 on any."`
}

func (c *journalVerifyCmd) Run(ctx context.Context) error {
	j, closeJ, err := forensics.Open(ctx, c.source())
	if err != nil {
		return err
	}
	defer closeJ()
	rep, err := forensics.Verify(j)
	if err != nil {
		return err
	}
	if c.JSON {
		if err := printJSON(rep); err != nil {
			return err
		}
	} else if len(rep.Findings) == 0 {
		fmt.Println(rep.Summary())
	} else {
		rep.Write(os.Stdout)
	}
	modelErr := verifyModel(c.Model, j, c.JSON)
	if len(rep.Findings) > 0 {
		return fmt.Errorf("verify: %d problems", len(rep.Findings))
	}
	return modelErr
}

type journalStatsCmd struct {
	journalSource
}

func (c *journalStatsCmd) Run(ctx context.Context) error {
	j, closeJ, err := forensics.Open(ctx, c.source())
	if err != nil {
		return err
	}
	defer closeJ()
	rep, err := forensics.Stats(j)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(rep)
	}
	rep.Write(os.Stdout)
	return nil
}

type journalExportCmd struct {
	journalSource
	Out string `required:"" help:"Where to write the copy."`
}

func (c *journalExportCmd) Run(ctx context.Context) error {
	if err := forensics.Export(ctx, c.source(), c.Out); err != nil {
		return err
	}
	fmt.Printf("exported to %s; check it with: go run go.etcd.io/bbolt/cmd/bbolt@v1.5.0 check %s\n", c.Out, c.Out)
	return nil
}
