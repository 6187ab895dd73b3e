package benchmark

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/submit"
)

// With FleetOptions.Processes every agent of the fleet is a process of its own: the bench binary
// again (`agentd-bench fleet-agent`, RunFleetAgent), running the very agent openAgent runs in
// process. Two hundred Go runtimes, each with its own scheduler and collector, on the same
// cores, read their answers and start their reports late as a busy host's agents do: those
// delays are part of the measure, where in one process the agents share one scheduler. The
// bench keeps the control plane and its gate, and drives each child by signals and reads it
// by lines on its stdout, so every scenario plays as in process:
//
//	child → bench: "ready" (its engine runs), "removed" / "removed early" (a container removed,
//	  early when the control plane had not accepted its task's STOPPED, asked over HTTP),
//	  "stopping" (a container's stop begun: the bench times it, fleetAgent.lastStop),
//	  "exited" (its running containers stopped), "verified N" (journal verify's findings, at
//	  its clean stop)
//	bench → child: SIGUSR1 (stop your running containers: an outage's exits), SIGTERM (stop
//	  cleanly, verify your journal, exit)
//
// A child dies with the bench (dieWithParent), so none outlives a bench killed at a timeout.

// fleetProcess is the bench's handle on one agent's process.
type fleetProcess struct {
	cmd      *exec.Cmd
	exited   chan struct{} // one a SIGUSR1 answered
	done     chan struct{} // its stdout ended
	findings int           // journal verify's, read from "verified N"
	verified bool
	stderr   *tailBuffer
}

// spawn starts agent a as a process of its own over its directory and waits until its engine
// runs.
func (f *fleet) spawn(ctx context.Context, a *fleetAgent) error {
	if f.o.Self == "" {
		return errors.New("bench fleet: --processes needs the bench binary to run the agents (FleetOptions.Self)")
	}
	args := []string{"fleet-agent", "--backend", "http://" + f.plane.addr, "--agent-id", a.id, "--dir", a.dir}
	if a.pol.Naive {
		args = append(args, "--naive")
	}
	cmd := exec.Command(f.o.Self, args...)
	dieWithParent(cmd)
	p := &fleetProcess{cmd: cmd, exited: make(chan struct{}, 1), done: make(chan struct{}), stderr: &tailBuffer{}}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s fleet-agent: %w", f.o.Self, err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "ready":
				close(ready)
			case line == "removed", line == "removed early":
				f.removed.Add(1)
				if line == "removed early" {
					f.early.Add(1)
				}
			case line == "stopping":
				a.stopped()
			case line == "exited":
				p.exited <- struct{}{}
			case strings.HasPrefix(line, "verified "):
				_, err := fmt.Sscanf(line, "verified %d", &p.findings)
				p.verified = err == nil
			}
		}
	}()
	select {
	case <-ready:
	case <-p.done:
		_ = cmd.Wait()
		return fmt.Errorf("fleet-agent %s ended before it was ready: %s", a.id, p.stderr)
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("fleet-agent %s not ready within 2 minutes: %s", a.id, p.stderr)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return ctx.Err()
	}
	a.proc = p
	a.stop = func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
		err := cmd.Wait()
		if err == nil && !p.verified {
			err = errors.New("no journal verify line")
		}
		if err != nil {
			return fmt.Errorf("fleet-agent %s: %w: %s", a.id, err, p.stderr)
		}
		return nil
	}
	return nil
}

// exitContainers stops every running container of every agent (an outage's exits), each in
// its own host: in process through its runtime, else by its process (SIGUSR1, then "exited").
func (f *fleet) exitContainers(ctx context.Context) error {
	if !f.o.Processes {
		for _, a := range f.agents {
			if err := stopRunning(ctx, a); err != nil {
				return err
			}
		}
		return nil
	}
	for _, a := range f.agents {
		if err := a.proc.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			return fmt.Errorf("fleet-agent %s: %w", a.id, err)
		}
	}
	for _, a := range f.agents {
		select {
		case <-a.proc.exited:
		case <-a.proc.done:
			return fmt.Errorf("fleet-agent %s ended while its containers were stopped: %s", a.id, a.proc.stderr)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// stopRunning stops the agent's running containers through its runtime.
func stopRunning(ctx context.Context, a *fleetAgent) error {
	list, err := a.rt.List(ctx)
	if err != nil {
		return err
	}
	for _, c := range list {
		if c.Running {
			if err := a.rt.Stop(ctx, c.ID, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// verify is journal verify's findings over every agent's journal: in process while the agents
// run, else each process's own at its clean stop (which this stops).
func (f *fleet) verify() (int, error) {
	n := 0
	for _, a := range f.agents {
		if f.o.Processes {
			if err := a.shut(); err != nil {
				return n, err
			}
			n += a.proc.findings
			continue
		}
		rep, err := forensics.Verify(a.j)
		if err != nil {
			return n, fmt.Errorf("journal verify %s: %w", a.id, err)
		}
		n += len(rep.Findings)
	}
	return n, nil
}

// FleetAgentOptions configure one agent of a fleet run as processes.
type FleetAgentOptions struct {
	Backend string // the control plane's URL (its operator side answers whether a task's STOPPED was accepted)
	AgentID string
	Dir     string // the agent's journal and simulated containers
	Naive   bool   // the naive policy
}

// RunFleetAgent is one agent of a fleet run as processes (fleetProcess): it runs until ctx
// ends (SIGTERM), then verifies its journal and stops cleanly; its lines go to out.
func RunFleetAgent(ctx context.Context, o FleetAgentOptions, out io.Writer) error {
	if _, err := url.Parse(o.Backend); err != nil || o.Backend == "" {
		return fmt.Errorf("--backend %q: want the control plane's URL", o.Backend)
	}
	if o.AgentID == "" || o.Dir == "" {
		return errors.New("--agent-id and --dir are needed")
	}
	if err := yieldToControlPlane(); err != nil {
		return fmt.Errorf("agent %s: lower its CPU priority: %w", o.AgentID, err)
	}
	var mu sync.Mutex
	say := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(out, line)
	}
	operator := &http.Client{Timeout: 10 * time.Second}
	accepted := func(arn string) bool {
		resp, err := operator.Get(o.Backend + "/v1/tasks/" + arn)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var t struct {
			Status string `json:"status"`
		}
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&t) == nil && t.Status == "STOPPED"
	}
	a := &fleetAgent{id: o.AgentID, dir: o.Dir, pol: submit.Policy{Naive: o.Naive}}
	removed := func(early bool) {
		if early {
			say("removed early")
		} else {
			say("removed")
		}
	}
	if err := openAgent(ctx, a, o.Backend, accepted, removed, func() { say("stopping") }); err != nil {
		return fmt.Errorf("agent %s in %s: %w", o.AgentID, o.Dir, err)
	}
	say("ready")
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	for {
		select {
		case <-usr1:
			if err := stopRunning(ctx, a); err != nil {
				a.shut()
				return fmt.Errorf("agent %s: stop its containers: %w", o.AgentID, err)
			}
			say("exited")
		case <-ctx.Done():
			rep, err := forensics.Verify(a.j)
			err = errors.Join(err, a.shut())
			if err != nil {
				return fmt.Errorf("agent %s: %w", o.AgentID, err)
			}
			say(fmt.Sprintf("verified %d", len(rep.Findings)))
			return nil
		}
	}
}

// tailBuffer keeps the last 2 KB written to it: a child's stderr, for the error that names it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
