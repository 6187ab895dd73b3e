package benchmark

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/protocol"
)

// ControlPlane measures the reference control plane at fleet size (issue 24): what each
// long-polling agent costs it. The control plane is the bench binary run as a child process
// (`agentd-bench serve-controlplane`: the reference control plane's code, cpserver.go), so its memory is its own, read from /proc/<pid>/status, never mixed
// with the agents' (`bench fleet` runs both in one process). The agents are raw HTTP clients
// in this process, N distinct agent ids: each is given a few tasks, has them delivered,
// acknowledges them and reports them RUNNING — so the control plane holds per-agent state, as
// it would for a live fleet — and then holds a long poll (PROTOCOL.md §1, the longest wait).
// With every poll held, the child's resident set and goroutines (its GET /v1/runtime) are read
// and set against the fresh control plane's. Nothing is judged: the issue gives no target.

// ControlPlaneOptions is what the control plane benchmark runs.
type ControlPlaneOptions struct {
	Server string // the binary run as the control plane: agentd-bench, which serves it with `serve-controlplane`
	Agents int    // agents, each holding one long poll
	Tasks  int    // tasks each agent is given before its long poll (0 to 50: one poll delivers them)
	// Started, when set, is called with the child's pid once it serves: for tests, which
	// break the run there and check the child is gone after.
	Started func(pid int)
}

// ControlPlaneResult is the control plane's footprint, fresh and with every agent's poll held.
type ControlPlaneResult struct {
	Agents        int     `json:"agents"`
	Tasks         int     `json:"tasks_per_agent"`
	PID           int     `json:"-"`             // the child's, once started (0: never started)
	SetupSeconds  float64 `json:"setup_seconds"` // from the first task queued to the last poll held
	FreshRSSKB    int64   `json:"fresh_rss_kb"`  // VmRSS once it serves, before any agent
	HeldRSSKB     int64   `json:"held_rss_kb"`   // VmRSS with every agent's poll held
	PeakRSSKB     int64   `json:"peak_rss_kb"`   // VmHWM then
	RSSPerAgentKB float64 `json:"rss_kb_per_agent"`
	// HeapPerAgentKB is the live Go heap's growth per agent (collected before each reading):
	// the part of the RSS the control plane's own data and its connections' buffers take.
	HeapPerAgentKB     float64 `json:"heap_kb_per_agent"`
	FreshGoroutines    uint64  `json:"fresh_goroutines"`
	HeldGoroutines     uint64  `json:"held_goroutines"`
	GoroutinesPerAgent float64 `json:"goroutines_per_agent"`
}

// cpSetupWorkers run the agents' setup requests, a few at a time: the setup is not measured,
// and few connections mean few left idle (each idle one is a goroutine in the child) — the
// long polls take them over.
const cpSetupWorkers = 16

// ControlPlane starts the control plane, brings o.Agents agents to a held long poll, reads
// the child's memory and goroutines, and stops it. The child is stopped on every path.
func ControlPlane(ctx context.Context, o ControlPlaneOptions) (res ControlPlaneResult, err error) {
	res = ControlPlaneResult{Agents: o.Agents, Tasks: o.Tasks}
	switch {
	case o.Server == "":
		return res, errors.New("bench controlplane: no agentd-bench binary to serve the control plane")
	case o.Agents < 1:
		return res, fmt.Errorf("bench controlplane: --agents %d: want at least 1", o.Agents)
	case o.Tasks < 0 || o.Tasks > 50:
		return res, fmt.Errorf("bench controlplane: --tasks %d: want 0 to 50 (one poll delivers them)", o.Tasks)
	}
	cp, err := startControlPlane(ctx, o.Server)
	if err != nil {
		return res, err
	}
	res.PID = cp.pid
	defer func() {
		if serr := cp.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	if o.Started != nil {
		o.Started(cp.pid)
	}
	// Requests end when the child does, so a child that dies mid-run fails the bench at once.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-cp.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	fail := func(err error) error {
		select {
		case <-cp.exited:
			return fmt.Errorf("bench controlplane: the control plane exited (%v): %w\n%s", cp.waitErr, err, cp.log())
		default:
			return err
		}
	}

	// One connection for the readings, the same before and after, so its own goroutines
	// count alike in both.
	meter := &cpClient{base: cp.base, http: &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}}
	defer meter.http.CloseIdleConnections()
	res.FreshRSSKB = procStatusKB(cp.pid, "VmRSS:")
	fresh, err := meter.runtime(ctx)
	if err != nil {
		return res, fail(err)
	}
	res.FreshGoroutines = fresh.Goroutines

	// Every agent's poll needs a connection of its own; the setup's are reused by the polls.
	agents := &cpClient{base: cp.base, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Agents + cpSetupWorkers}}}
	defer agents.http.CloseIdleConnections()
	start := time.Now()
	setupPolls, err := setupAgents(ctx, agents, o)
	if err != nil {
		return res, fail(err)
	}
	pollCtx, stopPolls := context.WithCancel(ctx)
	var polls sync.WaitGroup
	var early atomic.Int64
	for i := range o.Agents {
		polls.Go(func() {
			if agents.longPoll(pollCtx, cpAgentID(i)) == nil {
				early.Add(1) // answered before the readings: nothing was queued, so its wait ran out
			}
		})
	}
	// Cancelled before the wait: a poll's end is its connection closed.
	defer polls.Wait()
	defer stopPolls()
	if err := meter.awaitPolls(ctx, setupPolls+o.Agents); err != nil {
		return res, fail(err)
	}
	res.SetupSeconds = time.Since(start).Seconds()
	res.HeldRSSKB, res.PeakRSSKB = procStatusKB(cp.pid, "VmRSS:"), procStatusKB(cp.pid, "VmHWM:")
	held, err := meter.runtime(ctx)
	if err != nil {
		return res, fail(err)
	}
	res.HeldGoroutines = held.Goroutines
	if n := early.Load(); n > 0 {
		return res, fmt.Errorf("bench controlplane: %d of %d polls were answered before the readings (held under %ds?)", n, o.Agents, protocol.MaxWaitSeconds)
	}
	if (o.Tasks > 0 && held.Agents != o.Agents) || held.Tasks != o.Agents*o.Tasks {
		return res, fmt.Errorf("bench controlplane: the control plane holds %d agents and %d tasks, want %d and %d", held.Agents, held.Tasks, o.Agents, o.Agents*o.Tasks)
	}
	n := float64(o.Agents)
	res.RSSPerAgentKB = float64(res.HeldRSSKB-res.FreshRSSKB) / n
	res.HeapPerAgentKB = (float64(held.HeapBytes) - float64(fresh.HeapBytes)) / 1024 / n
	res.GoroutinesPerAgent = (float64(held.Goroutines) - float64(fresh.Goroutines)) / n
	return res, nil
}

func cpAgentID(i int) string { return fmt.Sprintf("cp-bench-%05d", i) }

// setupAgents gives every agent its tasks, has them delivered, acknowledged and reported
// RUNNING; it returns the polls that took.
func setupAgents(ctx context.Context, c *cpClient, o ControlPlaneOptions) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, cpSetupWorkers)
	var polls atomic.Int64
	var wg sync.WaitGroup
	for range min(cpSetupWorkers, o.Agents) {
		wg.Go(func() {
			for i := range next {
				n, err := c.setupAgent(ctx, cpAgentID(i), o.Tasks)
				polls.Add(int64(n))
				if err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
feed:
	for i := range o.Agents {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
		return int(polls.Load()), ctx.Err()
	}
}

// cpClient speaks to the control plane: the operator side and the agents' (PROTOCOL.md).
type cpClient struct {
	base string
	http *http.Client
}

// setupAgent brings one agent to a live state: tasks queued, delivered, acknowledged, and
// each task and its container reported RUNNING. It returns the polls it made.
func (c *cpClient) setupAgent(ctx context.Context, agent string, tasks int) (int, error) {
	if tasks == 0 {
		return 0, nil
	}
	for k := range tasks {
		task := protocol.Task{ARN: fmt.Sprintf("task/%s-%02d", agent, k), DesiredStatus: "RUNNING",
			Containers: []protocol.Container{{Name: "app", Image: "registry.example/app:1", Command: []string{"serve"}}}}
		raw, _ := json.Marshal(task)
		if err := c.do(ctx, http.MethodPost, "/v1/tasks", controlplane.AddTaskRequest{Agent: agent, Task: raw}, http.StatusCreated, nil); err != nil {
			return 0, err
		}
	}
	var poll protocol.PollResponse
	if err := c.do(ctx, http.MethodGet, "/v1/agents/"+agent+"/payloads?wait=0", nil, http.StatusOK, &poll); err != nil {
		return 1, err
	}
	var ids []string
	var changes []protocol.StateChange
	now := time.Now().UTC()
	for _, p := range poll.Payloads {
		ids = append(ids, p.MessageID)
		for _, raw := range p.Tasks {
			var t protocol.Task
			if err := json.Unmarshal(raw, &t); err != nil {
				return 1, fmt.Errorf("bench controlplane: %s: payload %s: %w", agent, p.MessageID, err)
			}
			changes = append(changes,
				protocol.StateChange{ID: "c-" + t.ARN + "-app-running", TaskARN: t.ARN, Container: "app", Status: "RUNNING", At: now},
				protocol.StateChange{ID: "c-" + t.ARN + "-running", TaskARN: t.ARN, Status: "RUNNING", At: now})
		}
	}
	if len(changes) != 2*tasks {
		return 1, fmt.Errorf("bench controlplane: %s: one poll delivered %d tasks, want %d", agent, len(changes)/2, tasks)
	}
	if err := c.do(ctx, http.MethodPost, "/v1/agents/"+agent+"/acks", protocol.AcksRequest{MessageIDs: ids}, http.StatusNoContent, nil); err != nil {
		return 1, err
	}
	var answer protocol.StateChangesResponse
	if err := c.do(ctx, http.MethodPost, "/v1/agents/"+agent+"/state-changes", protocol.StateChangesRequest{Changes: changes}, http.StatusOK, &answer); err != nil {
		return 1, err
	}
	if len(answer.Accepted) != len(changes) {
		return 1, fmt.Errorf("bench controlplane: %s: %d of %d changes accepted (rejected %v)", agent, len(answer.Accepted), len(changes), answer.Rejected)
	}
	return 1, nil
}

// longPoll holds one agent's poll with the protocol's longest wait until ctx ends (an error)
// or the control plane answers (nil).
func (c *cpClient) longPoll(ctx context.Context, agent string) error {
	var poll protocol.PollResponse
	return c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/agents/%s/payloads?wait=%d", agent, protocol.MaxWaitSeconds), nil, http.StatusOK, &poll)
}

// awaitPolls waits until the control plane has taken n polls: each counted one is in its
// handler, its connection's goroutines started.
func (c *cpClient) awaitPolls(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st controlplane.Stats
		if err := c.do(ctx, http.MethodGet, "/v1/stats", nil, http.StatusOK, &st); err != nil {
			return err
		}
		if st.Polls >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench controlplane: %d of %d polls taken within 30s", st.Polls, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runtime reads the control plane's goroutines and, collected first, its live heap: the RSS
// is read before it, as the kernel saw the process, garbage and all.
func (c *cpClient) runtime(ctx context.Context) (Runtime, error) {
	var rt Runtime
	err := c.do(ctx, http.MethodGet, "/v1/runtime?gc=1", nil, http.StatusOK, &rt)
	return rt, err
}

// do sends body as JSON (nil: none) and decodes the answer into out (nil: drained), or says
// which request got what.
func (c *cpClient) do(ctx context.Context, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("bench controlplane: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("bench controlplane: %s %s: HTTP %d, want %d: %s", method, path, resp.StatusCode, want, bytes.TrimSpace(b))
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("bench controlplane: %s %s: %w", method, path, err)
	}
	return nil
}

// cpProcess is the control plane as a child process, serving.
type cpProcess struct {
	cmd     *exec.Cmd
	pid     int
	base    string
	exited  chan struct{} // closed once the child has ended and been reaped
	waitErr error         // why, once exited is closed
	mu      sync.Mutex
	tail    []string // its last log lines
	once    sync.Once
	stopErr error
}

// startControlPlane runs `agentd-bench serve-controlplane` on a free loopback port and learns
// the port from its first log line. On error nothing is left running.
func startControlPlane(ctx context.Context, server string) (*cpProcess, error) {
	cmd := exec.Command(server, "serve-controlplane", "--listen", "127.0.0.1:0")
	dieWithParent(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench controlplane: start %s: %w", server, err)
	}
	p := &cpProcess{cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{})}
	listen := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > 20 {
				p.tail = p.tail[1:]
			}
			p.mu.Unlock()
			var entry struct {
				Listen string `json:"listen"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Listen != "" {
				select {
				case listen <- entry.Listen:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		// Wait only once the pipe is read to its end (os/exec's rule).
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	select {
	case addr := <-listen:
		p.base = "http://" + addr
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("bench controlplane: %s serve-controlplane exited before serving (%v):\n%s", server, p.waitErr, p.log())
	case <-ctx.Done():
		_ = p.stop()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		_ = p.stop()
		return nil, fmt.Errorf("bench controlplane: %s serve-controlplane not serving within 30s:\n%s", server, p.log())
	}
}

// stop ends the child — SIGTERM, then SIGKILL after 5 s — and reaps it. Called again, it
// returns what the first call did.
func (p *cpProcess) stop() error {
	p.once.Do(func() {
		select {
		case <-p.exited:
			return // ended by itself: its error, if any, was reported where it was seen
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			if p.waitErr != nil {
				p.stopErr = fmt.Errorf("bench controlplane: the control plane's exit: %w\n%s", p.waitErr, p.log())
			}
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			p.stopErr = errors.New("bench controlplane: the control plane did not stop within 5s of SIGTERM (killed)")
		}
	})
	return p.stopErr
}

func (p *cpProcess) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}
