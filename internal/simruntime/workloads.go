package simruntime

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
)

// workload is what the simulated runtime keeps of a container's PROTOCOL.md §4 fields:
// just enough to decide what Docker would — which host ports it gets, whether it is
// OOM-killed, what its health check concludes, how a stop ends it.
type workload struct {
	Bindings     []event.NetworkBinding `json:"bindings,omitempty"`
	OOM          bool                   `json:"oom,omitempty"` // killed as it starts: its alloc is over its memory limit
	HealthCheck  *event.HealthCheck     `json:"health_check,omitempty"`
	StopSignal   string                 `json:"stop_signal,omitempty"`
	StopTimeoutS *int                   `json:"stop_timeout_s,omitempty"`
}

// Docker's default health check timing (interval 30 s, 3 retries).
const (
	healthInterval = 30 * time.Second
	healthRetries  = 3
	firstPort      = 32768 // Docker's ephemeral range starts here
)

// planWorkload reads the command words of testbox beyond run, sleep and exit.
func planWorkload(cmd []string) (d time.Duration, code int, forever bool, err error) {
	switch cmd[0] {
	case "serve", "alloc", "spew":
		if len(cmd) != 2 {
			return 0, 0, false, fmt.Errorf("%s wants one number", cmd[0])
		}
		if _, err := strconv.Atoi(cmd[1]); err != nil {
			return 0, 0, false, fmt.Errorf("%s %q: %w", cmd[0], cmd[1], err)
		}
		return 0, 0, true, nil
	case "linger":
		if len(cmd) != 2 {
			return 0, 0, false, fmt.Errorf("linger wants a duration")
		}
		if _, err := time.ParseDuration(cmd[1]); err != nil {
			return 0, 0, false, fmt.Errorf("linger %q: %w", cmd[1], err)
		}
		return 0, 0, true, nil
	case "write":
		if len(cmd) != 3 {
			return 0, 0, false, fmt.Errorf("write wants a path and a text")
		}
		return 0, 0, false, nil
	case "cat":
		// Prints a file on Docker; here, like exit 0 (the simulation has no files).
		if len(cmd) != 2 {
			return 0, 0, false, fmt.Errorf("cat wants a path")
		}
		return 0, 0, false, nil
	case "probe":
		return 0, 0, false, nil
	}
	return 0, 0, false, fmt.Errorf("unknown command %q (run, sleep, exit, serve, alloc, spew, linger, write, cat, probe)", cmd[0])
}

// workload fills a new container's workload from its spec: host ports as Docker would
// assign them (a fixed one refused when a live container holds it; 0 picks the lowest free
// one from 32768), and an alloc over the memory limit marked for the OOM killer.
func (s *Runtime) setWorkload(c *container, spec event.ContainerSpec) error {
	c.HealthCheck, c.StopSignal, c.StopTimeoutS = spec.HealthCheck, spec.StopSignal, spec.StopTimeoutS
	if len(spec.Command) == 2 && spec.Command[0] == "alloc" && spec.MemoryMiB > 0 {
		if mib, err := strconv.ParseInt(spec.Command[1], 10, 64); err == nil && mib >= spec.MemoryMiB {
			c.OOM = true
		}
	}
	now := s.now()
	// Bound host ports, as Docker sees them: one port and protocol on overlapping host IPs
	// (protocol.HostIPsOverlap) is taken.
	var bound []event.NetworkBinding
	for _, o := range s.state.Containers {
		if len(spec.Ports) == 0 {
			break // nothing to bind: no scan of every container on each create
		}
		if _, _, ended := exitOf(o, now); ended || o.Agent != s.agent {
			continue
		}
		bound = append(bound, o.Bindings...)
	}
	taken := func(port int, proto, ip string) bool {
		for _, b := range bound {
			if b.HostPort == port && b.Protocol == proto && protocol.HostIPsOverlap(b.HostIP, ip) {
				return true
			}
		}
		return false
	}
	for _, p := range spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = "tcp"
		}
		host := p.HostPort
		if host == 0 {
			for host = firstPort; taken(host, proto, p.HostIP); host++ {
			}
		} else if taken(host, proto, p.HostIP) {
			return fmt.Errorf("port %d/%s is already allocated", host, proto)
		}
		ip := p.HostIP
		if ip == "" {
			ip = "0.0.0.0"
		}
		b := event.NetworkBinding{ContainerPort: p.ContainerPort, HostPort: host, Protocol: proto, HostIP: ip}
		c.Bindings = append(c.Bindings, b)
		if p.HostIP == "" {
			b.HostIP = "" // what it took: every address of both families
		}
		bound = append(bound, b)
	}
	runtime.SortBindings(c.Bindings)
	return nil
}

// stopCode is how a stop ends the container, as testbox would end under Docker: SIGKILL
// kills at once (137); SIGTERM or SIGINT end it with 143, but a `linger D` container takes D
// to exit 0 — within its stop timeout (stopTimeout, as in Engine.Stop) it exits 0, else it
// is killed (137).
func (c *container) stopCode(timeout time.Duration) int {
	timeout = runtime.StopTimeout(c.StopTimeoutS, timeout)
	if c.StopSignal == "SIGKILL" {
		return 137
	}
	if len(c.Command) == 2 && c.Command[0] == "linger" {
		if d, err := time.ParseDuration(c.Command[1]); err == nil {
			if d < timeout {
				return 0
			}
			return 137
		}
	}
	return 143
}

// health is the verdict of the container's health check at now, since when it holds, and
// when the next verdict is due (zero: none). The check's command is read as testbox words
// (after "CMD" and a program named testbox): one that exits 0 at once, or probe, passes —
// HEALTHY after the first interval; anything else fails — UNHEALTHY once retries failures
// have passed the start period.
func (c *container) health(now time.Time) (h event.Health, since, next time.Time) {
	hc := c.HealthCheck
	if hc == nil || c.StartedAt.IsZero() {
		return event.HealthUnknown, time.Time{}, time.Time{}
	}
	interval, retries := time.Duration(hc.IntervalS)*time.Second, hc.Retries
	if interval <= 0 {
		interval = healthInterval
	}
	if retries <= 0 {
		retries = healthRetries
	}
	words := hc.Command[1:]
	if len(words) > 0 && path.Base(words[0]) == "testbox" {
		words = words[1:]
	}
	passes := false
	if len(words) > 0 && words[0] == "probe" {
		passes = true
	} else if len(words) > 0 {
		d, code, forever, err := plan(words)
		passes = err == nil && !forever && d == 0 && code == 0
	}
	at := c.StartedAt.Add(interval)
	verdict := event.HealthHealthy
	if !passes {
		at = c.StartedAt.Add(time.Duration(hc.StartPeriodS)*time.Second + time.Duration(retries)*interval)
		verdict = event.HealthUnhealthy
	}
	if now.Before(at) {
		return event.HealthUnknown, time.Time{}, at
	}
	return verdict, at, time.Time{}
}

// Verdicts returns the current health verdict of every running container of this agent that
// has one, by id, and when the next verdict is due (zero: none planned). The deterministic
// simulation reads it directly; Health streams it.
func (s *Runtime) Verdicts() (verdicts []runtime.HealthChange, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for id := range s.index().checked { // only a container with a health check has a verdict
		c := s.state.Containers[id]
		if c == nil || c.Agent != s.agent {
			continue
		}
		if _, _, ended := exitOf(c, now); ended {
			continue
		}
		h, since, due := c.health(now)
		if h != event.HealthUnknown {
			verdicts = append(verdicts, runtime.HealthChange{ID: c.ID, Task: c.Task, Container: c.Container, Health: h, At: since})
		}
		if !due.IsZero() && (next.IsZero() || due.Before(next)) {
			next = due
		}
	}
	slices.SortFunc(verdicts, func(a, b runtime.HealthChange) int { return strings.Compare(a.ID, b.ID) })
	return verdicts, next
}

// Health streams verdicts: the current ones first, then each change. It wakes at the next
// due verdict or at the next change of the runtime, never polls.
func (s *Runtime) Health(ctx context.Context) (<-chan runtime.HealthChange, error) {
	out := make(chan runtime.HealthChange, 64)
	go func() {
		defer close(out)
		sent := map[string]event.Health{}
		for {
			s.mu.Lock()
			changed := s.changed
			s.mu.Unlock()
			verdicts, next := s.Verdicts()
			for _, v := range verdicts {
				if sent[v.ID] == v.Health {
					continue
				}
				select {
				case out <- v:
					sent[v.ID] = v.Health
				case <-ctx.Done():
					return
				}
			}
			if !s.await(ctx, changed, next) {
				return
			}
		}
	}()
	return out, nil
}

// Logs returns what testbox would have written: its start line on stdout (and, once it
// ended, its exit on stderr), in the engine's multiplexed stream format. The simulated
// runtime keeps no other output, so Follow returns what there is.
func (s *Runtime) Logs(ctx context.Context, id string, opts runtime.LogOptions) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.state.Containers[id]
	if !ok || c.Agent != s.agent {
		return nil, fmt.Errorf("logs %s: %w", id, runtime.ErrNotFound)
	}
	type line struct {
		stream stdcopy.StdType
		text   string
	}
	var lines []line
	if !c.StartedAt.IsZero() {
		lines = append(lines, line{stdcopy.Stdout, fmt.Sprintf("testbox: %v\n", c.Command)})
	}
	if _, code, ended := exitOf(c, s.now()); ended {
		lines = append(lines, line{stdcopy.Stderr, fmt.Sprintf("exited %d\n", code)})
	}
	if opts.Tail >= 0 && len(lines) > opts.Tail {
		lines = lines[len(lines)-opts.Tail:]
	}
	var b bytes.Buffer
	for _, l := range lines {
		writeFrame(&b, l.stream, []byte(l.text))
	}
	return io.NopCloser(&b), nil
}

// writeFrame writes one frame of the engine's multiplexed stream: the stream's type, three
// zero bytes, the payload's length (big-endian uint32), the payload. stdcopy reads it; the
// api module has no writer.
func writeFrame(w *bytes.Buffer, stream stdcopy.StdType, p []byte) {
	var hdr [8]byte
	hdr[0] = byte(stream)
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(p)))
	w.Write(hdr[:])
	w.Write(p)
}
