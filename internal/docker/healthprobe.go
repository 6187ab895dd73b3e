package docker

// Health checks the agent runs itself, for an engine that runs none (Podman without systemd
// timers: no check runs, no health_status event comes). The verdicts reach the same stream and
// State.Health as an engine's would (Health, inspect), so the engine journals and reports them
// exactly as it does Docker's.
//
// The rules are Docker's (moby daemon/health.go): the first probe one interval after the
// start, then one interval after each probe ends; a probe that exits 0 within its timeout
// passes, anything else fails; a pass makes the container healthy, retries failures in a row
// make it unhealthy, and failures inside the start period count for nothing. One prober runs
// per container, for as long as it runs and the Engine is open, whoever asked for it (a Start
// of this process, or a Health subscription that found the container running).

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// Docker's defaults for a health check's zero fields.
const (
	probeInterval = 30 * time.Second
	probeTimeout  = 30 * time.Second
	probeRetries  = 3
)

// probes is the agent's own health checking of one Engine.
type probes struct {
	mu       sync.Mutex
	running  map[string]bool                 // containers with a prober
	verdicts map[string]runtime.HealthChange // the latest verdict of each probed container
	subs     map[chan runtime.HealthChange]struct{}
	ctx      context.Context // ends when the Engine closes
	stop     context.CancelFunc
}

func newProbes() *probes {
	ctx, stop := context.WithCancel(context.Background())
	return &probes{running: map[string]bool{}, verdicts: map[string]runtime.HealthChange{}, subs: map[chan runtime.HealthChange]struct{}{}, ctx: ctx, stop: stop}
}

// verdict is the agent's latest verdict of the container (HealthUnknown: none yet).
func (p *probes) verdict(id string) event.Health {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.verdicts[id].Health
}

// ensure runs a prober for the container unless one runs.
func (e *Engine) ensureProbe(id string) {
	p := e.probes
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running[id] || p.ctx.Err() != nil {
		return
	}
	p.running[id] = true
	go e.probeLoop(id)
}

// probeLoop checks one container's health until it stops running or the Engine closes.
func (e *Engine) probeLoop(id string) {
	p := e.probes
	defer func() {
		p.mu.Lock()
		delete(p.running, id)
		delete(p.verdicts, id)
		p.mu.Unlock()
	}()
	c, st, err := e.inspect(p.ctx, id)
	if err != nil || !st.Running || c.Config == nil || !checks(c.Config.Healthcheck) {
		return
	}
	h := *c.Config.Healthcheck
	interval, timeout, retries := orDefault(h.Interval, probeInterval), orDefault(h.Timeout, probeTimeout), h.Retries
	if retries <= 0 {
		retries = probeRetries
	}
	started := st.StartedAt
	if started.IsZero() {
		started = time.Now()
	}
	count := probeCount{retries: retries, startPeriodEnds: started.Add(h.StartPeriod)}
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(interval):
		}
		pass, err := e.probeOnce(p.ctx, id, h.Test, timeout)
		if err != nil {
			return // not running any more (or the Engine closed)
		}
		if verdict, ok := count.after(pass, time.Now()); ok {
			p.publish(runtime.HealthChange{ID: id, Task: st.Task, Container: st.Container, Health: verdict, At: time.Now().UTC()})
		}
	}
}

// probeCount is Docker's rule over a container's probes: a pass is healthy, retries failures
// in a row unhealthy, and a failure before the start period ends counts for nothing.
type probeCount struct {
	retries         int
	startPeriodEnds time.Time
	failures        int
}

// after takes the outcome of the probe that ended at: the verdict it reaches, if any.
func (c *probeCount) after(pass bool, at time.Time) (event.Health, bool) {
	switch {
	case pass:
		c.failures = 0
		return event.HealthHealthy, true
	case at.Before(c.startPeriodEnds):
		return event.HealthUnknown, false
	}
	if c.failures++; c.failures < c.retries {
		return event.HealthUnknown, false
	}
	return event.HealthUnhealthy, true
}

// checks says whether the config asks for a check at all ("NONE" and an empty test do not).
func checks(h *container.HealthConfig) bool {
	return h != nil && len(h.Test) > 0 && h.Test[0] != "NONE"
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// probeOnce runs the check once through the engine's exec: whether it exited 0 within
// timeout. An error says the container no longer runs (or the Engine closed): probing ends.
func (e *Engine) probeOnce(ctx context.Context, id string, test []string, timeout time.Duration) (bool, error) {
	var cmd []string
	switch test[0] {
	case "CMD":
		cmd = test[1:]
	case "CMD-SHELL":
		cmd = append([]string{"/bin/sh", "-c"}, test[1:]...)
	default:
		cmd = test // an image's check may be given without its form
	}
	if len(cmd) == 0 {
		return false, nil
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ex, err := e.cli.ExecCreate(pctx, id, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err == nil {
		var att client.ExecAttachResult
		if att, err = e.cli.ExecAttach(pctx, ex.ID, client.ExecAttachOptions{}); err == nil {
			go func() { <-pctx.Done(); att.Close() }() // a probe past its timeout is cut off
			_, err = io.Copy(io.Discard, att.Reader)
		}
		if err == nil {
			for pctx.Err() == nil {
				res, ierr := e.cli.ExecInspect(pctx, ex.ID, client.ExecInspectOptions{})
				if ierr != nil || !res.Running {
					return ierr == nil && res.ExitCode == 0, nil
				}
				time.Sleep(10 * time.Millisecond) // the stream ended a moment before the exit was recorded
			}
		}
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if _, st, ierr := e.inspect(ctx, id); ierr != nil || !st.Running {
		return false, errors.Join(err, ierr, errors.New("the container does not run"))
	}
	return false, nil // a probe that failed to run or ran out of time fails
}

// publish records the verdict and sends it to every subscriber when it changed.
func (p *probes) publish(h runtime.HealthChange) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.verdicts[h.ID].Health == h.Health {
		return
	}
	p.verdicts[h.ID] = h
	for ch := range p.subs {
		select {
		case ch <- h:
		default:
			// A subscriber this far behind loses its stream rather than a change: it
			// subscribes again and starts with the current verdicts (runtime.Runtime.Health).
			delete(p.subs, ch)
			close(ch)
		}
	}
}

// probeHealth is Health for an engine that runs no checks: the agent's own verdicts, first
// the current one of every running container of this agent, then each change. Every running
// container of this agent gets a prober, as does each this process starts.
func (e *Engine) probeHealth(ctx context.Context) (<-chan runtime.HealthChange, error) {
	p := e.probes
	sub := make(chan runtime.HealthChange, 64)
	p.mu.Lock()
	p.subs[sub] = struct{}{}
	p.mu.Unlock()
	unsubscribe := func() {
		p.mu.Lock()
		if _, ok := p.subs[sub]; ok {
			delete(p.subs, sub)
			close(sub)
		}
		p.mu.Unlock()
	}
	list, err := e.List(ctx)
	if err != nil {
		unsubscribe()
		return nil, err
	}
	var current []runtime.HealthChange
	p.mu.Lock()
	for _, st := range list {
		if h, ok := p.verdicts[st.ID]; ok && st.Running {
			current = append(current, h)
		}
	}
	p.mu.Unlock()
	for _, st := range list {
		if st.Running {
			e.ensureProbe(st.ID)
		}
	}
	out := make(chan runtime.HealthChange, 64)
	go func() {
		defer close(out)
		defer unsubscribe()
		for _, h := range current {
			select {
			case out <- h:
			case <-ctx.Done():
				return
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.ctx.Done():
				return
			case h, ok := <-sub:
				if !ok {
					return
				}
				select {
				case out <- h:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
