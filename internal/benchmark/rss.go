package benchmark

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
)

// RSS measures the agent's own resident set as an operator would see it (issue 25): the agent
// is the agentd binary run as a child process (`agentd run --runtime sim`) against an
// in-process control plane, and its memory is read from /proc/<pid>/status — VmHWM, the
// kernel's high-water mark, for the peak, VmRSS for the figures at rest — so nothing of this
// benchmark's own memory is counted.

// RSSOptions is what the RSS benchmark runs.
type RSSOptions struct {
	Agentd     string        // the agentd binary to run as the agent
	Dir        string        // parent of the temporary data dirs ("": the system's temp dir)
	Burst      int           // one-container tasks posted at once to one agent
	Remembered int           // cleaned tasks within the retention in the journal of the agent at rest
	Settle     time.Duration // how long after the burst's last cleanup the steady RSS is read
}

// RSSResult is the agent's resident set, in MB (10^6 bytes).
type RSSResult struct {
	Burst        int     `json:"burst"`
	BurstSeconds float64 `json:"burst_seconds"` // from the first task posted to the last cleaned
	FreshMB      float64 `json:"fresh_rss_mb"`  // a fresh agent (empty journal) at rest
	PeakMB       float64 `json:"peak_rss_mb"`   // VmHWM once the burst is through
	SteadyMB     float64 `json:"steady_rss_mb"` // VmRSS from Settle after the burst's last cleanup (median over restWindow)
	PeakVsSteady float64 `json:"peak_vs_steady"`
	// RestartedMB is the agent restarted on the journal the burst left, at rest: what it needs
	// for the tasks it then remembers. The same process after the burst keeps the burst's
	// freed heap resident until its next collection, which an idle agent makes only every two
	// minutes (its RSS 10 to 40 s after the burst was flat), so the peak is judged against this.
	RestartedMB float64 `json:"restarted_rss_mb"`
	PeakVsRest  float64 `json:"peak_vs_rest"` // target ≤ 2
	// RememberedMB is an agent at rest on a journal of Remembered cleaned tasks (built as the
	// recovery benchmark builds its journals), restarted on it.
	Remembered   int     `json:"remembered"`
	RememberedMB float64 `json:"remembered_rss_mb"`
	// The burst is the real mix: each task in a payload of its own, cleaned and remembered.
	// HeapPerTask is the agent's live heap (go_gc_heap_live_bytes, marked by a collection)
	// over the fresh agent's, a remembered task: after the burst, at the agent's first
	// collection after it (heapAfterBurst; 0: none), and restarted on its journal (the
	// collection run.go makes when ready). Target ≤ 300 bytes (issue 41).
	FreshHeapBytes       int64   `json:"fresh_heap_live_bytes"`
	HeapPerTask          float64 `json:"heap_bytes_per_task"`
	RestartedHeapPerTask float64 `json:"restarted_heap_bytes_per_task"`
	HeapPerTaskWorst     float64 `json:"heap_bytes_per_task_worst"`
}

// RSS runs the burst through a fresh agent, then restarts it on its journal, then starts an
// agent on a journal of o.Remembered cleaned tasks.
func RSS(ctx context.Context, o RSSOptions) (RSSResult, error) {
	res := RSSResult{Burst: o.Burst, Remembered: o.Remembered}
	if o.Agentd == "" {
		return res, errors.New("bench rss: no agentd binary to run")
	}
	cp := controlplane.New("", controlplane.Faults{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	srv := &http.Server{Handler: cp.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	backend := "http://" + ln.Addr().String()

	dir, err := os.MkdirTemp(o.Dir, "agentd-bench-rss-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	if err := burstRSS(ctx, o, cp, backend, dir, &res); err != nil {
		return res, err
	}
	if o.Remembered <= 0 {
		return res, nil
	}
	rdir, err := os.MkdirTemp(o.Dir, "agentd-bench-rss-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(rdir)
	b, err := build(ctx, filepath.Join(rdir, journal.FileName), 14*o.Remembered+1, 0, rememberedChurn())
	if err != nil {
		return res, err
	}
	if n := len(b.st.Tombstones); n != o.Remembered {
		b.j.Close()
		return res, fmt.Errorf("bench rss: the journal remembers %d tasks, want %d", n, o.Remembered)
	}
	if err := b.j.Close(); err != nil {
		return res, err
	}
	a, err := startChild(ctx, o.Agentd, rdir, backend)
	if err != nil {
		return res, err
	}
	defer a.cleanup()
	res.RememberedMB = mb(atRest(a.pid, vmRSS))
	return res, nil
}

// burstRSS posts o.Burst tasks at once to a fresh agent and reads its memory before, at the
// peak, after, and restarted on the journal the burst left.
func burstRSS(ctx context.Context, o RSSOptions, cp *controlplane.Server, backend, dir string, res *RSSResult) error {
	a, err := startChild(ctx, o.Agentd, dir, backend)
	if err != nil {
		return err
	}
	defer a.cleanup()
	res.FreshMB = mb(atRest(a.pid, vmRSS))
	if res.FreshHeapBytes, err = liveHeap(ctx, a.api); err != nil {
		return err
	}
	start := time.Now()
	for i := 0; i < o.Burst; i++ {
		// An ARN as ECS makes them: what a host remembers is mostly its tasks' ARNs.
		t := protocol.Task{ARN: fmt.Sprintf("arn:aws:ecs:eu-west-1:123456789012:task/rss/%08d", i), DesiredStatus: "RUNNING",
			Containers: []protocol.Container{{Name: "app", Image: "x", Command: []string{"exit", "0"}}}}
		if err := cp.AddTask(benchAgent, t, nil); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(time.Duration(o.Burst)*10*time.Millisecond + 5*time.Minute)
	for {
		n, err := cleanups(ctx, a.api)
		if err != nil {
			return err
		}
		if n >= o.Burst {
			break
		}
		select {
		case <-a.run.exited:
			return fmt.Errorf("bench rss: the agent exited (%v) with %d of %d tasks cleaned:\n%s", a.run.exitErr(), n, o.Burst, a.run.log())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench rss: only %d of %d tasks cleaned in time", n, o.Burst)
		}
	}
	res.BurstSeconds = time.Since(start).Seconds()
	time.Sleep(o.Settle)
	res.SteadyMB = mb(settled(a.pid, vmRSS, restWindow, restSample))
	if err := heapAfterBurst(ctx, a.api, o.Burst, res); err != nil {
		return err
	}
	res.PeakMB = mb(procPeakKB(a.pid) * 1024) // the high-water mark of the whole run, read last
	if res.SteadyMB > 0 {
		res.PeakVsSteady = res.PeakMB / res.SteadyMB
	}
	a.cleanup()
	r, err := startChild(ctx, o.Agentd, dir, backend)
	if err != nil {
		return err
	}
	defer r.cleanup()
	res.RestartedMB = mb(atRest(r.pid, vmRSS))
	live, err := liveHeap(ctx, r.api)
	if err != nil {
		return err
	}
	res.RestartedHeapPerTask = float64(live-res.FreshHeapBytes) / float64(o.Burst)
	res.HeapPerTaskWorst = max(res.HeapPerTask, res.RestartedHeapPerTask)
	if res.RestartedMB > 0 {
		res.PeakVsRest = res.PeakMB / res.RestartedMB
	}
	return nil
}

// child is an agent under test, ready.
type child struct {
	run     *agentRun
	pid     int
	api     string
	cleanup func()
}

// startChild runs `agentd run` on the simulated runtime in dir and waits until /healthz says
// it is ready (its recovery done).
func startChild(ctx context.Context, agentd, dir, backend string) (*child, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	args := []string{"run", "--runtime", "sim", "--data-dir", dir, "--backend", backend, "--agent-id", benchAgent,
		"--cleanup-wait", "0s", "--listen", addr, "--log-level", "warn"}
	run, cleanup, err := childAgent(agentd)(ctx, dir, args)
	if err != nil {
		cleanup()
		return nil, err
	}
	c := &child{run: run, pid: run.pid, api: "http://" + addr, cleanup: cleanup}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.api+"/healthz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c, nil
			}
		}
		select {
		case <-run.exited:
			cleanup()
			return nil, fmt.Errorf("bench rss: the agent exited before it was ready (%v):\n%s", run.exitErr(), run.log())
		case <-ctx.Done():
			cleanup()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cleanup()
			return nil, errors.New("bench rss: the agent was not ready within 5 minutes")
		}
	}
}

// cleanups is the agent's agentd_cleanups_total, from its /metrics.
func cleanups(ctx context.Context, api string) (int, error) {
	n, err := metric(ctx, api, "agentd_cleanups_total")
	return int(n), err
}

// heapAfterBurst reads the agent's live heap at its second collection once it has been idle
// after the burst (Settle and restWindow after its last cleanup: read at once, it counted the
// compaction and snapshot still at work, 407 bytes a task where at rest it holds 275), or at
// the first if no second comes within gcWait (0: none did). The second, because what the
// burst left in sync.Pools survives one collection: read at the first, 250–296 bytes a task
// in three runs. The collections are the agent's own release of memory (engine/memory.go) or
// the runtime's, at least every two minutes.
func heapAfterBurst(ctx context.Context, api string, burst int, res *RSSResult) error {
	gcs, err := metric(ctx, api, "go_gc_duration_seconds_count")
	if err != nil {
		return err
	}
	for end := time.Now().Add(gcWait); time.Now().Before(end); time.Sleep(restSample) {
		n, err := metric(ctx, api, "go_gc_duration_seconds_count")
		if err != nil || n <= gcs {
			continue
		}
		live, err := liveHeap(ctx, api)
		if err != nil {
			return err
		}
		res.HeapPerTask = float64(live-res.FreshHeapBytes) / float64(burst)
		if n >= gcs+2 {
			return nil
		}
	}
	return nil
}

// gcWait bounds the wait for two collections: the runtime forces one every two minutes.
const gcWait = 270 * time.Second

// liveHeap is the heap the agent's last collection marked live (go_gc_heap_live_bytes).
func liveHeap(ctx context.Context, api string) (int64, error) {
	n, err := metric(ctx, api, "go_gc_heap_live_bytes")
	if err == nil && n <= 0 {
		err = errors.New("bench rss: the agent's /metrics has no go_gc_heap_live_bytes")
	}
	return int64(n), err
}

// metric is the value of an unlabelled metric in the agent's /metrics (0: not there). It asks
// for it uncompressed: a gzipped answer leaves the agent pooled compressors (0.8 MB, 40 bytes
// a task of 20,000) a single collection keeps, which this benchmark's polling, not the tasks,
// put there.
func metric(ctx context.Context, api, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("bench rss: metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, sc.Err()
}

// The resident set at rest is what an operator's dashboard shows for an idle agent: the level
// it sits at once its start is over, not one reading. A single reading 3 s after /healthz said
// ready read 38–58 MB for the same journal (issue 25): ready comes when recovery is done,
// before the agent gives back what recovery left (run.go: ReleaseMapped, FreeOSMemory), which
// on a loaded host took seconds — so one reading landed before the release, another after.
// So the agent is given restGrace to settle, then its resident set is sampled every
// restSample for restWindow and the median taken: a moment's spike (a collection, a poll)
// neither makes nor breaks it, and a release still under way is at most half the window.
const (
	restGrace  = 3 * time.Second
	restWindow = 10 * time.Second
	restSample = 250 * time.Millisecond
)

// atRest is the agent's settled resident set: the median of the readings over restWindow,
// from restGrace after it became ready.
func atRest(pid int, read func(int) int64) int64 {
	time.Sleep(restGrace)
	return settled(pid, read, restWindow, restSample)
}

// settled is the median of read(pid) sampled every step for window (0: none read).
func settled(pid int, read func(int) int64, window, step time.Duration) int64 {
	var got []int64
	for end := time.Now().Add(window); ; time.Sleep(step) {
		if v := read(pid); v > 0 {
			got = append(got, v)
		}
		if !time.Now().Before(end) {
			break
		}
	}
	if len(got) == 0 {
		return 0
	}
	slices.Sort(got)
	return got[len(got)/2]
}

// rememberedChurn builds the journal of bench rss's remembered tasks: every task cleaned and
// kept (a retention longer than the run), ending at exactly the tasks asked for.
func rememberedChurn() churnConfig {
	return churnConfig{SnapshotEvery: 20000, Retention: 1000 * time.Hour, Keep: true}
}

// vmRSS is a process's resident set in bytes, 0 when it cannot be read.
func vmRSS(pid int) int64 { return procStatusKB(pid, "VmRSS:") * 1024 }

func mb(bytes int64) float64 { return float64(bytes) / 1e6 }
