package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/agentd/agentd/internal/benchmark"
)

type benchRecoveryCmd struct {
	Records []int  `default:"1000000,10000000" help:"Journal sizes in records."`
	Live    int    `default:"10000" help:"Live, long-running tasks in each journal."`
	Dir     string `help:"Directory for the journals (default: the system's temp dir)."`
	JSON    bool   `name:"json" help:"Print one JSON object."`
}

func (b *benchRecoveryCmd) Run(ctx context.Context) error {
	res, err := benchmark.Recovery(ctx, b.Dir, b.Records, b.Live)
	if err != nil {
		return err
	}
	if b.JSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "records\tlive\ttombstones\ttail replayed\tready (snapshots)\tready (full replay)\treplay --at halfway\tbytes/record\tfile bytes each million records")
	for _, r := range res.Rows {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f\t%v\n", r.Records, r.LiveTasks, r.Tombstones, r.TailRecords, r.ReadyMs, r.BaselineMs, r.ReplayAtMs, r.BytesPerRecord, r.SizeOverTime)
	}
	w.Flush()
	if len(res.Rows) > 1 {
		fmt.Printf("largest vs smallest ready time: %.2fx (target ≤ 1.2x); smallest ready %.0f ms (target ≤ 1000 ms at 1M)\n", res.LargeVsSmall, res.Rows[0].ReadyMs)
	}
	return nil
}

type benchRSSCmd struct {
	Burst      int           `default:"20000" help:"One-container tasks posted at once to one agent."`
	Remembered int           `default:"100000" help:"Cleaned tasks within the retention in the journal of the agent measured at rest."`
	Settle     time.Duration `default:"10s" help:"How long after the burst's last cleanup the steady RSS is read."`
	Dir        string        `help:"Directory for the temporary data dirs (default: the system's temp dir)."`
	JSON       bool          `name:"json" help:"Print one JSON object."`
}

func (b *benchRSSCmd) Run(ctx context.Context, agentd agentdFlag) error {
	self, err := agentd.path()
	if err != nil {
		return err
	}
	res, err := benchmark.RSS(ctx, benchmark.RSSOptions{Agentd: self, Dir: b.Dir, Burst: b.Burst, Remembered: b.Remembered, Settle: b.Settle})
	if err != nil {
		return err
	}
	if b.JSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	return printRows(rssRows(res))
}

// rssRows are the RSS benchmark's rows, the same in `bench rss` and `bench all`. The heap a
// remembered task costs is judged at 20,000 tasks or more: under that (bench all --quick), the
// agent's fixed costs beside its fresh self (a snapshot's buffers, pools) are most of it.
func rssRows(r benchmark.RSSResult) []benchRow {
	return []benchRow{
		{"rss", fmt.Sprintf("peak RSS MB, %d tasks posted at once to one agent", r.Burst), r.PeakMB,
			fmt.Sprintf("at rest after (median of 10 s settled), restarted %.0f MB (same process 10 s after: %.0f, %.2fx); fresh %.0f", r.RestartedMB, r.SteadyMB, r.PeakVsSteady, r.FreshMB), r.PeakVsRest, "≤ 2x at rest", r.PeakVsRest <= 2},
		{"rss", fmt.Sprintf("heap bytes per remembered task, %d tasks a payload each (agentd run)", r.Burst), r.HeapPerTaskWorst,
			fmt.Sprintf("live after the burst %s, restarted %.0f; fresh agent's live heap %.1f MB", liveAfterBurst(r), r.RestartedHeapPerTask, float64(r.FreshHeapBytes)/1e6), 0, "≤ 300 at 20,000", r.Burst < 20000 || r.HeapPerTaskWorst <= 300},
		{"rss", fmt.Sprintf("RSS MB at rest, %d remembered tasks", r.Remembered), r.RememberedMB,
			fmt.Sprintf("fresh agent %.0f MB", r.FreshMB), r.RememberedMB / max(r.FreshMB, 1), "-", true},
	}
}

// liveAfterBurst is the heap a remembered task held after the burst, at the agent's second
// collection once idle after it.
func liveAfterBurst(r benchmark.RSSResult) string {
	if r.HeapPerTask == 0 {
		return "not read (no collection within 270 s)"
	}
	return fmt.Sprintf("%.0f", r.HeapPerTask)
}

type benchLifecycleCmd struct {
	Tasks int    `default:"10000" help:"Tasks to run from assignment to cleanup."`
	Dir   string `help:"Directory for the temporary journal (default: the system's temp dir)."`
	JSON  bool   `name:"json" help:"Print one JSON object."`
}

func (b *benchLifecycleCmd) Run(ctx context.Context) error {
	res, err := benchmark.Lifecycle(ctx, b.Dir, b.Tasks)
	if err != nil {
		return err
	}
	if b.JSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("%d tasks assigned, run, stopped, reported, acknowledged and cleaned in %.1fs: %.0f tasks/s (target ≥ 1000); %d records in %d commits\n",
		res.Tasks, res.Seconds, res.TasksPerSec, res.Records, res.Commits)
	fmt.Printf("journal cost per task: %.2f commits (%.2f fsyncs; target ≤ 0.5 commits), %.1f records, %.0f record bytes, %.0f bytes of pages written\n",
		res.CommitsPerTask, res.FsyncsPerTask, res.RecordsPerTask, res.RecordBytesPerTask, res.DiskBytesPerTask)
	fmt.Printf("CPU per task: %.2f ms (the whole process: agent, in-process control plane and simulated runtime)\n", res.CPUPerTaskMs)
	fmt.Printf("a lone task, assigned to STOPPED accepted, %d run one at a time: p50 %.1f ms, p99 %.1f ms\n", res.LoneTasks, res.LoneP50Ms, res.LoneP99Ms)
	return nil
}

type benchWaitingCmd struct {
	Tasks int    `default:"10000" help:"Tasks stopped and awaiting acknowledgement."`
	Dir   string `help:"Directory for the temporary journal (default: the system's temp dir)."`
	JSON  bool   `name:"json" help:"Print one JSON object."`
}

func (b *benchWaitingCmd) Run(ctx context.Context) error {
	res, err := benchmark.Waiting(ctx, b.Dir, b.Tasks)
	if err != nil {
		return err
	}
	if b.JSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("%d tasks awaiting ack: %d goroutines (%d before the agent started; target ≤ 50), heap %.1f MB (target ≤ 100)\n",
		res.Tasks, res.Goroutines, res.GoroutinesIdle, res.HeapMB)
	fmt.Printf("after the acks: cleanup started p50 %.1f ms, p99 %.1f ms after each stopped-acked (target ≤ 100 ms); all cleaned in %.1fs\n",
		res.CleanupP50ms, res.CleanupP99ms, res.SettleSeconds)
	return nil
}

type benchThrottledCmd struct {
	RPS   float64 `name:"rps" default:"10" help:"Control plane throttle, requests per second."`
	Tasks int     `default:"5000" help:"Stopped tasks in the backlog (two changes each)."`
	Dir   string  `help:"Directory for the temporary journal (default: the system's temp dir)."`
	JSON  bool    `name:"json" help:"Print one JSON object."`
}

func (b *benchThrottledCmd) Run(ctx context.Context) error {
	res, err := benchmark.Throttled(ctx, benchmark.ThrottledOptions{Dir: b.Dir, RPS: b.RPS, Tasks: b.Tasks})
	if err != nil {
		return err
	}
	if b.JSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("settled %d changes in %.1fs: %.0f/s against a ceiling of %.0f/s (%g req/s × 100): ratio %.2f (target ≥ 0.90)\n",
		res.Changes, res.Seconds, res.SettledPerSec, res.Ceiling, res.RPS, res.Ratio)
	fmt.Printf("%d requests settled, %d throttled; %.1f changes per settled request\n", res.Requests, res.Throttled, res.ChangesPerBatch)
	return nil
}

type benchJournalCmd struct {
	Events    int    `default:"30000" help:"Events appended by each contender, over all rounds."`
	Rounds    int    `default:"3" help:"Interleaved rounds; each contender's median round is reported."`
	Producers int    `default:"64" help:"Concurrent appenders."`
	Dir       string `help:"Directory on the disk to measure (a temporary subdirectory is used and removed)."`
	JSON      bool   `name:"json" help:"Print one JSON object instead of a table."`
}

func (b *benchJournalCmd) Run(ctx context.Context) error {
	if b.Dir == "" {
		b.Dir = os.TempDir()
	}
	m, err := benchmark.MeasureMachine(b.Dir, 50)
	if err != nil {
		return err
	}
	if !b.JSON {
		fmt.Println("machine:", m)
	}
	res, err := benchmark.Journal(ctx, benchmark.JournalOptions{Dir: b.Dir, Events: b.Events, Producers: b.Producers, Rounds: b.Rounds})
	if err != nil {
		return err
	}
	if b.JSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "contender (%d producers, median of %d rounds)\tevents/s\tp50\tp99\tbytes/event\trecords/commit\tpages/commit\n", res.Producers, res.Rounds)
	for _, c := range []benchmark.Contender{res.Naive, res.Batch, res.Journal, res.Ceiling} {
		perCommit, pagesPer := "-", "-"
		if c.Commits > 0 {
			perCommit, pagesPer = fmt.Sprintf("%.1f", c.RecordsPerCommit), fmt.Sprintf("%.1f", c.PagesPerCommit)
		}
		fmt.Fprintf(w, "%s\t%.0f\t%v\t%v\t%.0f\t%s\t%s\n", c.Name, c.EventsPerSec, c.P50.Round(time.Microsecond), c.P99.Round(time.Microsecond), c.BytesPerEvent, perCommit, pagesPer)
	}
	w.Flush()
	fmt.Println()
	return printRows(journalRows(res))
}

type benchDockerCmd struct {
	Tasks       int    `default:"200" help:"Lifecycles each side runs."`
	Concurrency int    `default:"20" help:"Tasks in flight at once, each side."`
	Rounds      int    `default:"4" help:"Rounds; the sides alternate which goes first (more, shorter rounds: a neighbour's burst of load weighs on both sides alike)."`
	Image       string `default:"agentd-testbox:latest" help:"The test image (make testbox-image)."`
	DockerHost  string `help:"Docker Engine address (default: the client's environment and defaults)."`
	Dir         string `help:"Directory for the agent's data dir (default: the system's temp dir)."`
	AgentImage  string `name:"agent-image" placeholder:"agentd:VERSION" help:"Also run the agent as a container of this image (make image), as README 'As a container' runs it: a third side, its own rows."`
	JSON        bool   `name:"json" help:"Print one JSON object."`
}

func (b *benchDockerCmd) Run(ctx context.Context, agentd agentdFlag) error {
	self, err := agentd.path()
	if err != nil {
		return err
	}
	res, err := benchmark.Docker(ctx, b.options(self))
	if err != nil {
		return err
	}
	if b.JSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("Docker API calls per task: agentd %s (and %.1f a run: %v); bare loop %s (and %.1f a run)\n",
		res.AgentCalls, res.AgentCalls.SessionPerRun, res.AgentCalls.SessionByKind, res.BareCalls, res.BareCalls.SessionPerRun)
	fmt.Println()
	return printRows(dockerRows(res))
}

func (b *benchDockerCmd) options(self string) benchmark.DockerOptions {
	return benchmark.DockerOptions{Agentd: self, Dir: b.Dir, Host: b.DockerHost, Image: b.Image, Tasks: b.Tasks, Concurrency: b.Concurrency, Rounds: b.Rounds, AgentImage: b.AgentImage}
}

// callRatio is the agent's calls per task over the bare loop's (0: not counted).
func callRatio(d benchmark.DockerResult) float64 {
	if d.BareCalls.PerTask == 0 {
		return 0
	}
	return d.AgentCalls.PerTask / d.BareCalls.PerTask
}

// dockerRows are the Docker benchmark's rows, the same in `bench docker` and `bench all`.
func dockerRows(d benchmark.DockerResult) []benchRow {
	rows := []benchRow{
		{"docker", fmt.Sprintf("agentd wall s, %d tasks %d at a time", d.Tasks, d.Concurrency), d.AgentSeconds, fmt.Sprintf("bare moby-client loop %.1f s", d.BareSeconds), d.Ratio, "≤ 1.05x", d.Ratio <= 1.05},
		{"docker", "agentd CPU s per 1,000 lifecycles", d.AgentCPUPer1k, "-", 0, "-", true},
		// Calls a task, beside the CPU they cost: the tasks here have no ports, so the agent
		// needs no more of the engine than the bare loop does.
		{"docker", "agentd Docker API calls per task (no ports)", d.AgentCalls.PerTask, fmt.Sprintf("bare loop %.2f", d.BareCalls.PerTask),
			callRatio(d), "≤ bare loop", d.AgentCalls.PerTask > 0 && d.AgentCalls.PerTask <= d.BareCalls.PerTask},
		{"docker", "agentd peak RSS MB", d.AgentPeakMB, "-", 0, "-", true},
	}
	if d.AgentImage != "" {
		// The container's rows are shown, not judged: its figures are its cgroup's, which count
		// what a process's do not (the journal's page cache), so they have no budget of their own yet.
		rows = append(rows,
			benchRow{"docker", fmt.Sprintf("container %s wall s", d.AgentImage), d.ContainerSeconds, fmt.Sprintf("bare moby-client loop %.1f s", d.BareSeconds), d.ContainerRatio, "-", true},
			benchRow{"docker", "container CPU s per 1,000 lifecycles (cgroup)", d.ContainerCPUPer1k, "-", 0, "-", true},
			benchRow{"docker", "container peak memory MB (cgroup, with page cache)", d.ContainerPeakMemMB, "-", 0, "-", true},
		)
	}
	return rows
}
