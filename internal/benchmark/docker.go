package benchmark

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	dockerevents "github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
)

// DockerOptions configure the Docker Engine benchmark.
type DockerOptions struct {
	Agentd      string // the agentd binary to run as the agent under test
	Dir         string // parent of the agent's data dir
	Host        string // Docker Engine address ("" = the client's environment and defaults)
	Image       string // the test image (agentd-testbox:latest)
	Tasks       int    // lifecycles each side runs, over all rounds
	Concurrency int    // tasks in flight at once, each side
	Rounds      int    // the sides alternate which goes first, round by round (default 4)
	// AgentImage, when set, adds a side: the agent as a container of this image (--net host,
	// the engine's socket and its data dir mounted), beside the child process.
	AgentImage string
	// For the tests of a failing run: the tasks' command on the agent's side (nil: exit 0),
	// and how long the agent may go without cleaning a task (0: stallLimit).
	taskCommand []string
	stallAfter  time.Duration
}

// DockerResult is the same lifecycles run by a bare moby-client loop and by agentd, on the
// same engine in the same run.
type DockerResult struct {
	Tasks         int     `json:"tasks"`
	Concurrency   int     `json:"concurrency"`
	Rounds        int     `json:"rounds"`
	BareSeconds   float64 `json:"bare_seconds"`
	AgentSeconds  float64 `json:"agent_seconds"`
	Ratio         float64 `json:"ratio_agent_vs_bare"`
	AgentCPUPer1k float64 `json:"agent_cpu_seconds_per_1000"` // user + system of the agentd process
	AgentPeakMB   float64 `json:"agent_peak_rss_mb"`
	// The agent as a container of AgentImage, when asked for: its CPU and peak memory are its
	// cgroup's (memory counts the page cache of its journal, which a process's RSS does not).
	AgentImage         string  `json:"agent_image,omitempty"`
	ContainerSeconds   float64 `json:"container_seconds,omitempty"`
	ContainerRatio     float64 `json:"ratio_container_vs_bare,omitempty"`
	ContainerCPUPer1k  float64 `json:"container_cpu_seconds_per_1000,omitempty"`
	ContainerPeakMemMB float64 `json:"container_peak_cgroup_memory_mb,omitempty"`
	// The Docker API calls of each side, counted by a proxy in front of the engine
	// (dockercalls.go): the agent's per task beside the bare loop's, for tasks without ports.
	AgentCalls DockerCalls `json:"agent_calls"`
	BareCalls  DockerCalls `json:"bare_calls"`
}

// Docker runs Tasks one-container lifecycles twice on the Docker Engine, Concurrency at a
// time: by a bare loop with the moby client (create, start, wait, remove: the least any agent
// must ask of the engine), and by agentd as its own process (assigned by an in-process control
// plane, run, exited, reported, acknowledged, removed), in rounds that alternate which side
// goes first, so a neighbour's load weighs on both. The engine is the limit; the ratio of the
// summed wall times says what the agent adds. The agent's CPU time and peak RSS come from the
// kernel's accounting of its process (a fresh one each round: its start is counted). With
// AgentImage the agent also runs as a container of that image, a third side in the same
// rotation, measured by its cgroup (containerAgent). The bare loop and the agent's process
// reach the engine through a proxy each that counts their calls (callProxy), so both pay its
// hop; the agent's container does not.
func Docker(ctx context.Context, o DockerOptions) (DockerResult, error) {
	res := DockerResult{Tasks: o.Tasks, Concurrency: o.Concurrency}
	if o.Tasks <= 0 || o.Concurrency <= 0 {
		return res, errors.New("bench docker: --tasks and --concurrency must be positive")
	}
	opts := []client.Opt{client.FromEnv}
	if o.Host != "" {
		opts = append(opts, client.WithHost(o.Host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return res, fmt.Errorf("bench docker: --docker-host %q: %w", o.Host, err)
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, o.Image); err != nil {
		return res, fmt.Errorf("bench docker: image %s: %w (build it with `make testbox-image`)", o.Image, err)
	}
	if o.Rounds <= 0 {
		o.Rounds = 4
	}
	res.Rounds = o.Rounds
	per := o
	per.Tasks = max(o.Tasks/o.Rounds, 1)
	if o.AgentImage != "" {
		if _, err := cli.ImageInspect(ctx, o.AgentImage); err != nil {
			return res, fmt.Errorf("bench docker: --agent-image %s: %w (build it with `make image`)", o.AgentImage, err)
		}
		res.AgentImage = o.AgentImage
	}
	// One agent side per way of running it; the bare loop is side 0.
	type agentSide struct {
		launch    agentLauncher
		took, cpu time.Duration
		peak      int64
		counted   bool // through a call-counting proxy (the child process)
	}
	sides := []*agentSide{{launch: childAgent(o.Agentd), counted: true}}
	if o.AgentImage != "" {
		sides = append(sides, &agentSide{launch: containerAgent(cli, o.AgentImage)})
	}
	var bare time.Duration
	n := len(sides) + 1
	for r := 0; r < o.Rounds; r++ {
		for i := 0; i < n; i++ {
			side := (i + r) % n // each round starts one side later
			if side == 0 {
				took, calls, err := countedBareLoop(ctx, cli, per)
				if err != nil {
					return res, err
				}
				bare += took
				res.BareCalls.add(calls, per.Tasks)
				continue
			}
			s := sides[side-1]
			var proxy *callProxy
			host := o.Host
			if s.counted {
				if proxy, err = newCallProxy(o.Dir, cli.DaemonHost()); err != nil {
					return res, err
				}
				host = proxy.host()
			}
			took, cpu, peak, err := agentLoop(ctx, cli, per, host, s.launch)
			if proxy != nil {
				res.AgentCalls.add(proxy.counts(), per.Tasks)
				proxy.close()
			}
			if err != nil {
				return res, err
			}
			s.took += took
			s.cpu += cpu
			s.peak = max(s.peak, peak)
		}
	}
	res.Tasks = per.Tasks * o.Rounds
	res.AgentCalls.done()
	res.BareCalls.done()
	per1k := func(cpu time.Duration) float64 { return cpu.Seconds() * 1000 / float64(res.Tasks) }
	res.BareSeconds, res.AgentSeconds = bare.Seconds(), sides[0].took.Seconds()
	res.Ratio = res.AgentSeconds / res.BareSeconds
	res.AgentCPUPer1k = per1k(sides[0].cpu)
	res.AgentPeakMB = float64(sides[0].peak) / (1 << 20)
	if len(sides) > 1 {
		c := sides[1]
		res.ContainerSeconds = c.took.Seconds()
		res.ContainerRatio = res.ContainerSeconds / res.BareSeconds
		res.ContainerCPUPer1k = per1k(c.cpu)
		res.ContainerPeakMemMB = float64(c.peak) / (1 << 20)
	}
	return res, nil
}

const benchLabel = "io.agentd.bench"

// stallLimit is how long the agent under test may go without cleaning a task while some are
// assigned: far beyond any one call of a loaded engine (tens of seconds), so only a task that
// is not moving — an exit never seen, a report never sent, a removal never made — reaches it.
const stallLimit = 3 * time.Minute

// countedBareLoop is bareLoop through a call-counting proxy of its own.
func countedBareLoop(ctx context.Context, cli *client.Client, o DockerOptions) (time.Duration, map[string]int, error) {
	proxy, err := newCallProxy(o.Dir, cli.DaemonHost())
	if err != nil {
		return 0, nil, err
	}
	defer proxy.close()
	pcli, err := client.New(client.WithHost(proxy.host()))
	if err != nil {
		return 0, nil, fmt.Errorf("bench docker: client through the call counter: %w", err)
	}
	defer pcli.Close()
	took, err := bareLoop(ctx, pcli, o)
	return took, proxy.counts(), err
}

// bareLoop is the yardstick: Concurrency workers, each taking the next of Tasks and doing
// what one lifecycle must ask of the engine, nothing more.
func bareLoop(ctx context.Context, cli *client.Client, o DockerOptions) (time.Duration, error) {
	run := fmt.Sprintf("bare-%d", time.Now().UnixNano())
	defer removeLabelled(cli, benchLabel+"="+run)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, o.Concurrency)
	start := time.Now()
	for w := 0; w < o.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)); i <= o.Tasks; i = int(next.Add(1)) {
				if err := bareLifecycle(ctx, cli, o.Image, run, i); err != nil {
					errs <- fmt.Errorf("bench docker: bare loop, task %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return took, ctx.Err()
}

func bareLifecycle(ctx context.Context, cli *client.Client, image, run string, i int) error {
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       fmt.Sprintf("agentd-%s-%d", run, i),
		Config:     &container.Config{Image: image, Cmd: []string{"exit", "0"}, Labels: map[string]string{benchLabel: run}},
		HostConfig: &container.HostConfig{},
	})
	if err != nil {
		return err
	}
	if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return err
	}
	wait := cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-wait.Result:
	case err := <-wait.Error:
		return err
	}
	_, err = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{RemoveVolumes: true, Force: true})
	return err
}

// removeLabelled removes whatever a run left behind (after a failure).
func removeLabelled(cli *client.Client, label string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label)})
	if err != nil {
		return
	}
	for _, c := range list.Items {
		_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{RemoveVolumes: true, Force: true})
	}
}

// agentArgs are the flags of the agent under test, the same whether it runs as a child
// process or as a container.
// Its introspection API listens on the unix socket api (apiSocket), so a run that fails can
// ask it what became of the tasks it did not clean.
func agentArgs(dir, api, backend, agentID, host string) []string {
	args := []string{"run", "--runtime", "docker", "--data-dir", dir, "--backend", backend, "--agent-id", agentID,
		"--cleanup-wait", "0s", "--listen", "unix:" + api, "--log-level", "warn"}
	if host != "" {
		args = append(args, "--docker-host", host)
	}
	return args
}

// agentRun is one running agent under test, however it was started.
type agentRun struct {
	pid     int             // the agent's process id when it is a child process (0: a container)
	exited  <-chan struct{} // closed when the agent has ended, by itself or by stop
	exitErr func() error    // why it ended, once exited is closed
	// stop ends the agent and says what it used: CPU time and peak memory in bytes.
	stop func() (time.Duration, int64, error)
	log  func() string // the tail of its log, for errors
}

// agentLauncher starts an agent with args, its data dir dir; cleanup (always called, even
// after an error) removes whatever it started.
type agentLauncher func(ctx context.Context, dir string, args []string) (run *agentRun, cleanup func(), err error)

// childAgent runs the agentd binary at path as a child process; its CPU time and peak RSS
// come from the kernel's accounting of that process.
func childAgent(path string) agentLauncher {
	return func(ctx context.Context, dir string, args []string) (*agentRun, func(), error) {
		cmd := exec.CommandContext(ctx, path, args...)
		logf, err := os.Create(filepath.Join(dir, "agentd.log"))
		if err != nil {
			return nil, func() {}, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, func() {}, fmt.Errorf("bench docker: start %s: %w", path, err)
		}
		exited := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(exited) }()
		logTail := func() string { b, _ := os.ReadFile(logf.Name()); return tail(b, 2000) }
		stopped := false
		stop := func() (time.Duration, int64, error) {
			if stopped {
				return 0, 0, errors.New("bench docker: agentd already stopped")
			}
			stopped = true
			peakKB := procPeakKB(cmd.Process.Pid)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
				if waitErr != nil {
					return 0, 0, fmt.Errorf("bench docker: agentd: %w\n%s", waitErr, logTail())
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				return 0, 0, errors.New("bench docker: agentd did not stop within 30s of SIGTERM")
			}
			ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			if ru == nil {
				return 0, 0, errors.New("bench docker: no resource usage for the agent process")
			}
			if peakKB <= 0 {
				peakKB = ru.Maxrss
			}
			// The kernel's ru_maxrss of a child started by vfork counts the parent's resident
			// set at the fork (this benchmark's own, gigabytes after the recovery rows): the
			// child's own high-water mark is its VmHWM, read just before the SIGTERM.
			return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), peakKB * 1024, nil
		}
		cleanup := func() {
			if !stopped {
				_, _, _ = stop()
			}
			logf.Close()
		}
		return &agentRun{pid: cmd.Process.Pid, exited: exited, exitErr: func() error { return waitErr }, stop: stop, log: logTail}, cleanup, nil
	}
}

// agentLoop runs an agent against an in-process control plane and keeps Concurrency tasks
// assigned until Tasks have been cleaned; a task counts as cleaned when the engine reports
// its container destroyed. It returns the wall time and what the agent used. It fails when
// the agent stops making progress — no task cleaned for stallLimit while some wait — never
// for being slow: a loaded machine slows the engine for the bare loop as much, and the ratio
// of the two sides' times judges the agent's speed.
//
// (It used to fail past Tasks×1 s + 2 min for the whole run: a fixed bound that a busy shared
// machine's engine — creates and starts taking 20–40 s each — overran with every task
// progressing, the last ones assigned late, and said only "only 49 of 50 tasks cleaned in
// time".)
func agentLoop(ctx context.Context, cli *client.Client, o DockerOptions, host string, launch agentLauncher) (time.Duration, time.Duration, int64, error) {
	dir, err := os.MkdirTemp(o.Dir, "agentd-bench-docker-")
	if err != nil {
		return 0, 0, 0, err
	}
	keepDir := false
	defer func() {
		if !keepDir {
			os.RemoveAll(dir)
		}
	}()
	agentID := fmt.Sprintf("agent-bench-%d", time.Now().UnixNano())
	defer removeLabelled(cli, runtime.LabelAgent+"="+agentID)
	cp := controlplane.New("", controlplane.Faults{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, 0, err
	}
	srv := &http.Server{Handler: cp.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// Subscribe before anything is created, so no destroy is missed. Each destroy names its
	// task (the container's labels): the tasks assigned and not yet destroyed are the ones a
	// failed run tells about (notCleaned), with every event the engine sent of their
	// containers (seen).
	ectx, cancelEvents := context.WithCancel(ctx)
	defer cancelEvents()
	events := cli.Events(ectx, client.EventsListOptions{Filters: client.Filters{}.
		Add("type", "container").Add("label", runtime.LabelAgent+"="+agentID)})
	seen := engineEvents{}

	api, dropAPI, err := apiSocket(dir)
	if err != nil {
		return 0, 0, 0, err
	}
	defer dropAPI()
	run, cleanup, err := launch(ctx, dir, agentArgs(dir, api, "http://"+ln.Addr().String(), agentID, host))
	defer cleanup()
	if err != nil {
		return 0, 0, 0, err
	}

	command := o.taskCommand
	if command == nil {
		command = []string{"exit", "0"}
	}
	waiting := map[string]time.Time{} // tasks assigned and not yet cleaned: when each was assigned
	assign := func(i int) error {
		arn := fmt.Sprintf("task/docker-%06d", i)
		waiting[arn] = time.Now()
		return cp.AddTask(agentID, protocol.Task{ARN: arn, DesiredStatus: "RUNNING",
			Containers: []protocol.Container{{Name: "app", Image: o.Image, Command: command}}}, nil)
	}
	start := time.Now()
	assigned := 0
	for ; assigned < min(o.Concurrency, o.Tasks); assigned++ {
		if err := assign(assigned); err != nil {
			return 0, 0, 0, err
		}
	}
	limit := cmp.Or(o.stallAfter, stallLimit)
	stalled := time.NewTimer(limit)
	defer stalled.Stop()
	for cleaned := 0; cleaned < o.Tasks; {
		select {
		case m := <-events.Messages:
			if m.Action != dockerevents.ActionDestroy {
				seen.add(m)
				continue
			}
			delete(seen, m.Actor.ID) // gone: no failure will ask of it
			cleaned++
			delete(waiting, m.Actor.Attributes[runtime.LabelTask])
			stalled.Reset(limit)
			if assigned < o.Tasks {
				if err := assign(assigned); err != nil {
					return 0, 0, 0, err
				}
				assigned++
			}
		case err := <-events.Err:
			return 0, 0, 0, fmt.Errorf("bench docker: engine events: %w", err)
		case <-run.exited:
			return 0, 0, 0, fmt.Errorf("bench docker: agentd exited early (%v) after %d of %d tasks:\n%s", run.exitErr(), cleaned, o.Tasks, run.log())
		case <-stalled.C:
			// What each side knew of the tasks not cleaned, asked while the agent still runs;
			// the data dir (journal, log) is kept for `agentd journal`.
			keepDir = true
			return 0, 0, 0, fmt.Errorf("bench docker: no task cleaned for %s, %d of %d cleaned in %s, by agent %s; its data dir and log are kept in %s\n%s",
				limit, cleaned, o.Tasks, time.Since(start).Round(time.Second), agentID, dir, notCleaned(cli, cp, api, agentID, start, waiting, seen)+run.log())
		case <-ctx.Done():
			return 0, 0, 0, ctx.Err()
		}
	}
	took := time.Since(start)
	cpu, peak, err := run.stop()
	if err != nil {
		return 0, 0, 0, err
	}
	return took, cpu, peak, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// procPeakKB is a process's peak resident set (VmHWM) in KiB, 0 when it cannot be read.
func procPeakKB(pid int) int64 { return procStatusKB(pid, "VmHWM:") }

// procStatusKB is a field of /proc/<pid>/status counted in KiB (VmHWM, VmRSS), 0 when it
// cannot be read.
func procStatusKB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb)
			return kb
		}
	}
	return 0
}
