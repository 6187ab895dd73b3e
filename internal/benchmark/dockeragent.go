package benchmark

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// containerAgent runs the agent as a container of image, the way README "As a container"
// runs it: --net host (it reaches the in-process control plane on loopback), the engine's
// socket mounted at the same path, the data dir mounted at the same path, the same flags as
// the child process. Its CPU time and peak memory are its cgroup's, read from the engine's
// one-shot stats just before it is stopped (so, unlike the child's, its shutdown is not
// counted); the container is removed however the run ends.
func containerAgent(cli *client.Client, image string) agentLauncher {
	return func(ctx context.Context, dir string, args []string) (*agentRun, func(), error) {
		host := cli.DaemonHost()
		hc := &container.HostConfig{NetworkMode: "host", Binds: []string{dir + ":" + dir}}
		for i, a := range args {
			// An API socket outside the data dir (apiSocket) is reached through its own directory.
			if sock, ok := strings.CutPrefix(a, "unix:"); ok && i > 0 && args[i-1] == "--listen" && filepath.Dir(sock) != dir {
				hc.Binds = append(hc.Binds, filepath.Dir(sock)+":"+filepath.Dir(sock))
			}
		}
		if u, err := url.Parse(host); err == nil && u.Scheme == "unix" {
			hc.Binds = append(hc.Binds, u.Path+":"+u.Path)
		}
		name := fmt.Sprintf("agentd-bench-agent-%d", time.Now().UnixNano())
		c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name: name,
			// A TTY: the log is one plain stream, read back for errors.
			Config: &container.Config{Image: image, Cmd: args, Tty: true,
				Env: []string{"DOCKER_HOST=" + host}, Labels: map[string]string{benchLabel: name}},
			HostConfig: hc,
		})
		if err != nil {
			return nil, func() {}, fmt.Errorf("bench docker: create the agent's container from %s: %w", image, err)
		}
		wctx, cancelWait := context.WithCancel(context.Background())
		cleanup := func() {
			cancelWait()
			rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = cli.ContainerRemove(rctx, c.ID, client.ContainerRemoveOptions{RemoveVolumes: true, Force: true})
		}
		// Wait is asked before the start, so even an agent that ends at once is seen ending.
		wait := cli.ContainerWait(wctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
		if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			return nil, cleanup, fmt.Errorf("bench docker: start the agent's container %s: %w", name, err)
		}
		exited := make(chan struct{})
		var exitErr error
		go func() {
			defer close(exited)
			select {
			case r := <-wait.Result:
				if r.StatusCode != 0 {
					exitErr = fmt.Errorf("container %s exited with %d", name, r.StatusCode)
				}
			case err := <-wait.Error:
				exitErr = fmt.Errorf("container %s: %w", name, err)
			}
		}()
		logTail := func() string {
			lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rc, err := cli.ContainerLogs(lctx, c.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "40"})
			if err != nil {
				return err.Error()
			}
			defer rc.Close()
			b, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
			return tail(b, 2000)
		}
		stop := func() (time.Duration, int64, error) {
			cpu, peak, err := cgroupUsage(ctx, cli, c.ID)
			if err != nil {
				return 0, 0, fmt.Errorf("bench docker: the agent's container %s: %w", name, err)
			}
			timeout := 30
			if _, err := cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
				return 0, 0, fmt.Errorf("bench docker: stop the agent's container %s: %w", name, err)
			}
			select {
			case <-exited:
			case <-time.After(time.Minute):
				return 0, 0, fmt.Errorf("bench docker: the agent's container %s did not stop within a minute", name)
			}
			if exitErr != nil {
				return 0, 0, fmt.Errorf("bench docker: agentd: %w\n%s", exitErr, logTail())
			}
			return cpu, peak, nil
		}
		return &agentRun{exited: exited, exitErr: func() error { return exitErr }, stop: stop, log: logTail}, cleanup, nil
	}
}

// cgroupUsage is a running container's CPU time and peak memory (bytes) so far, from the
// engine's one-shot stats of its cgroup.
func cgroupUsage(ctx context.Context, cli *client.Client, id string) (time.Duration, int64, error) {
	res, err := cli.ContainerStats(ctx, id, client.ContainerStatsOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("stats: %w", err)
	}
	defer res.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return 0, 0, fmt.Errorf("stats: %w", err)
	}
	cpu, peak := st.CPUStats.CPUUsage.TotalUsage, st.MemoryStats.MaxUsage
	if cpu == 0 || peak == 0 {
		// cgroup v2 has no max_usage: say so rather than report a zero.
		return 0, 0, errors.New("stats: no CPU usage or peak memory (max_usage: cgroup v1 only)")
	}
	return time.Duration(cpu), int64(peak), nil
}
