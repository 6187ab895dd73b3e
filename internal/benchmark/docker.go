package benchmark

import (
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
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/protocol"
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
}

// Docker runs Tasks one-container lifecycles twice on the Docker Engine, Concurrency at a
// time: by a bare loop with the moby client (create, start, wait, remove: the least any agent
// must ask of the engine), and by agentd as its own process (assigned by an in-process control
// plane, run, exited, reported, acknowledged, removed), in rounds that alternate which side
// goes first, so a neighbour's load weighs on both. The engine is the limit; the ratio of the
// summed wall times says what the agent adds. The agent's CPU time and peak RSS come from the
// kernel's accounting of its process (a fresh one each round: its start is counted).
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
	var bare, agent, cpu time.Duration
	var peak int64
	for r := 0; r < o.Rounds; r++ {
		for side := 0; side < 2; side++ {
			if (side+r)%2 == 0 {
				took, err := bareLoop(ctx, cli, per)
				if err != nil {
					return res, err
				}
				bare += took
				continue
			}
			took, usage, err := agentLoop(ctx, cli, per)
			if err != nil {
				return res, err
			}
			agent += took
			cpu += time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
			peak = max(peak, usage.Maxrss)
		}
	}
	res.Tasks = per.Tasks * o.Rounds
	res.BareSeconds, res.AgentSeconds = bare.Seconds(), agent.Seconds()
	res.Ratio = res.AgentSeconds / res.BareSeconds
	res.AgentCPUPer1k = cpu.Seconds() * 1000 / float64(res.Tasks)
	res.AgentPeakMB = float64(peak) / 1024 // kilobytes on Linux
	return res, nil
}

const benchLabel = "io.agentd.bench"

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

// agentLoop runs agentd as a child process against an in-process control plane and keeps
// Concurrency tasks assigned until Tasks have been cleaned; a task counts as cleaned when the
// engine reports its container destroyed.
func agentLoop(ctx context.Context, cli *client.Client, o DockerOptions) (time.Duration, *syscall.Rusage, error) {
	dir, err := os.MkdirTemp(o.Dir, "agentd-bench-docker-")
	if err != nil {
		return 0, nil, err
	}
	defer os.RemoveAll(dir)
	agentID := fmt.Sprintf("agent-bench-%d", time.Now().UnixNano())
	defer removeLabelled(cli, docker.LabelAgent+"="+agentID)
	cp := controlplane.New("", controlplane.Faults{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	srv := &http.Server{Handler: cp.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// Subscribe before anything is created, so no destroy is missed.
	ectx, cancelEvents := context.WithCancel(ctx)
	defer cancelEvents()
	events := cli.Events(ectx, client.EventsListOptions{Filters: client.Filters{}.
		Add("type", "container").Add("event", "destroy").Add("label", docker.LabelAgent+"="+agentID)})

	cmd := exec.CommandContext(ctx, o.Agentd, "run", "--runtime", "docker", "--data-dir", dir,
		"--backend", "http://"+ln.Addr().String(), "--agent-id", agentID, "--cleanup-wait", "0s",
		"--listen", "127.0.0.1:0", "--log-level", "warn")
	if o.Host != "" {
		cmd.Args = append(cmd.Args, "--docker-host", o.Host)
	}
	logf, err := os.Create(filepath.Join(dir, "agentd.log"))
	if err != nil {
		return 0, nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("bench docker: start %s: %w", o.Agentd, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	var peakKB int64
	stop := func() (*syscall.Rusage, error) {
		if !stopped {
			stopped = true
			peakKB = procPeakKB(cmd.Process.Pid)
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case err := <-exited:
			if err != nil {
				log, _ := os.ReadFile(logf.Name())
				return nil, fmt.Errorf("bench docker: agentd: %w\n%s", err, tail(log, 2000))
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return nil, errors.New("bench docker: agentd did not stop within 30s of SIGTERM")
		}
		ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if ru != nil && peakKB > 0 {
			// The kernel's ru_maxrss of a child started by vfork counts the parent's resident
			// set at the fork (this benchmark's own, gigabytes after the recovery rows): the
			// child's own high-water mark is its VmHWM.
			ru.Maxrss = peakKB
		}
		return ru, nil
	}
	defer func() {
		if !stopped {
			_, _ = stop()
		}
	}()

	assign := func(i int) error {
		return cp.AddTask(agentID, protocol.Task{ARN: fmt.Sprintf("task/docker-%06d", i), DesiredStatus: "RUNNING",
			Containers: []protocol.Container{{Name: "app", Image: o.Image, Command: []string{"exit", "0"}}}}, nil)
	}
	start := time.Now()
	assigned := 0
	for ; assigned < min(o.Concurrency, o.Tasks); assigned++ {
		if err := assign(assigned); err != nil {
			return 0, nil, err
		}
	}
	deadline := time.NewTimer(time.Duration(o.Tasks)*time.Second + 2*time.Minute)
	defer deadline.Stop()
	for cleaned := 0; cleaned < o.Tasks; {
		select {
		case <-events.Messages:
			cleaned++
			if assigned < o.Tasks {
				if err := assign(assigned); err != nil {
					return 0, nil, err
				}
				assigned++
			}
		case err := <-events.Err:
			return 0, nil, fmt.Errorf("bench docker: engine events: %w", err)
		case err := <-exited:
			stopped = true
			log, _ := os.ReadFile(logf.Name())
			return 0, nil, fmt.Errorf("bench docker: agentd exited early (%v) after %d of %d tasks:\n%s", err, cleaned, o.Tasks, tail(log, 2000))
		case <-deadline.C:
			return 0, nil, fmt.Errorf("bench docker: only %d of %d tasks cleaned in time", cleaned, o.Tasks)
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
	took := time.Since(start)
	ru, err := stop()
	if err != nil {
		return 0, nil, err
	}
	if ru == nil {
		return 0, nil, errors.New("bench docker: no resource usage for the agent process")
	}
	return took, ru, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// procPeakKB is a process's peak resident set (VmHWM) in KiB, 0 when it cannot be read.
func procPeakKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb)
			return kb
		}
	}
	return 0
}
