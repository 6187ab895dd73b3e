package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/agentd/agentd/internal/benchmark"
)

type benchAllCmd struct {
	Quick bool   `help:"Smaller sizes (minutes become seconds; the targets are stated for the full sizes)."`
	Dir   string `help:"Directory for temporary files (default: the system's temp dir)."`
	JSON  bool   `name:"json" help:"Print the rows as JSON."`
}

type benchRow struct {
	Bench    string  `json:"benchmark"`
	Figure   string  `json:"figure"`
	Value    float64 `json:"value"`
	Baseline string  `json:"baseline"`
	Ratio    float64 `json:"ratio"`
	Target   string  `json:"target"`
	Pass     bool    `json:"pass"`
}

func (b *benchAllCmd) Run(ctx context.Context) error {
	events, tasks, recovery := 60000, 10000, []int{1000000, 10000000}
	if b.Quick {
		events, tasks, recovery = 12000, 2000, []int{100000, 1000000}
	}
	var rows []benchRow
	add := func(r benchRow) { rows = append(rows, r); fmt.Fprintf(os.Stderr, "done: %s %s\n", r.Bench, r.Figure) }

	j, err := benchmark.Journal(ctx, benchmark.JournalOptions{Dir: b.Dir, Events: events, Producers: 64, Rounds: 3})
	if err != nil {
		return err
	}
	add(benchRow{"journal", "group commit events/s, 64 producers", j.JournalEPS, fmt.Sprintf("one commit per event %.0f/s", j.NaiveEPS), j.VsNaive, "≥ 25x", j.VsNaive >= 25})
	add(benchRow{"journal", "group commit events/s, 64 producers", j.JournalEPS, fmt.Sprintf("DB.Batch %.0f/s", j.BatchEPS), j.VsBatch, "≥ 15x", j.VsBatch >= 15})
	add(benchRow{"journal", "bytes on disk per record", j.BytesPerEvent, "-", 0, "≤ 200", j.BytesPerEvent <= 200})
	add(benchRow{"journal", "p99 append latency ms", j.JournalP99ms, "-", 0, "-", true})

	l, err := benchmark.Lifecycle(ctx, b.Dir, tasks)
	if err != nil {
		return err
	}
	add(benchRow{"lifecycle", fmt.Sprintf("tasks/s, %d tasks unthrottled", tasks), l.TasksPerSec, "-", 0, "≥ 1000", l.TasksPerSec >= 1000})

	th, err := benchmark.Throttled(ctx, benchmark.ThrottledOptions{Dir: b.Dir, RPS: 10, Tasks: tasks / 2})
	if err != nil {
		return err
	}
	add(benchRow{"throttled", "changes settled/s at 10 req/s", th.SettledPerSec, fmt.Sprintf("ceiling %.0f/s", th.Ceiling), th.Ratio, "≥ 0.9", th.Ratio >= 0.9})

	w, err := benchmark.Waiting(ctx, b.Dir, tasks)
	if err != nil {
		return err
	}
	add(benchRow{"waiting", fmt.Sprintf("goroutines, %d tasks awaiting ack", tasks), float64(w.Goroutines), fmt.Sprintf("%d before the agent", w.GoroutinesIdle), 0, "≤ 50", w.Goroutines <= 50})
	add(benchRow{"waiting", "heap MB while waiting", w.HeapMB, "-", 0, "≤ 100", w.HeapMB <= 100})
	add(benchRow{"waiting", "cleanup start after ack, p99 ms", w.CleanupP99ms, fmt.Sprintf("p50 %.1f ms", w.CleanupP50ms), 0, "≤ 100", w.CleanupP99ms <= 100})

	r, err := benchmark.Recovery(ctx, b.Dir, recovery, 10000)
	if err != nil {
		return err
	}
	for _, row := range r.Rows {
		add(benchRow{"recovery", fmt.Sprintf("ready ms, %d records, 10k live", row.Records), row.ReadyMs, fmt.Sprintf("full replay %.0f ms", row.BaselineMs), row.BaselineMs / row.ReadyMs, "≤ 1000 ms at 1M", row.Records != 1000000 || row.ReadyMs <= 1000})
		add(benchRow{"forensics", fmt.Sprintf("journal replay --at halfway ms, %d records", row.Records), row.ReplayAtMs, "-", 0, "seconds", row.ReplayAtMs < 10000})
	}
	if len(r.Rows) > 1 {
		add(benchRow{"recovery", "ready time, largest vs smallest journal", r.LargeVsSmall, "-", 0, "≤ 1.2x", r.LargeVsSmall <= 1.2})
		last := r.Rows[len(r.Rows)-1]
		add(benchRow{"disk", "bytes per record under churn with compaction", last.BytesPerRecord, fmt.Sprintf("used bytes each million: %v", last.SizeOverTime), 0, "≤ 200 and flat", last.BytesPerRecord <= 200})
	}

	if b.JSON {
		return json.NewEncoder(os.Stdout).Encode(rows)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tfigure\tvalue\tbaseline\tratio\ttarget\tpass")
	for _, r := range rows {
		ratio := "-"
		if r.Ratio != 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		pass := "PASS"
		if !r.Pass {
			pass = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%s\t%s\t%s\t%s\n", r.Bench, r.Figure, r.Value, r.Baseline, ratio, r.Target, pass)
	}
	return tw.Flush()
}
