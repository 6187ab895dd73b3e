package docker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
)

// Engine is the Docker Engine runtime, through the maintained moby client module
// (github.com/moby/moby/client; github.com/docker/docker is frozen). The client is pinned and
// kept behind Runtime: it is still 0.x and changes between minor versions.
//
// Only what the protocol carries reaches Docker (containerConfig, hostconfig.go): the fields
// of PROTOCOL.md §4 as validated at arrival, and agentd's labels. No privileged mode, no host
// network, no bind mount outside --allow-bind-root, nothing from unknown payload fields.
type Engine struct {
	cli   *client.Client
	agent string
	host  string
	// ours holds the ids of containers known to carry this agent's id: created by it, or
	// inspected or listed with its label. A container's labels never change, so once known,
	// stop and remove need not inspect it again: one engine call a step instead of two.
	ours sync.Map // id → struct{}
	// fresh holds the ids of containers this process created and has not yet asked to start:
	// such a container has never run, so its first start needs no inspect for the guard.
	// The first Start takes the id out before it calls the engine, so any later Start — a
	// re-dispatch after a failed commit, or after a call that timed out yet took effect —
	// inspects as before; a restart begins with the set empty.
	fresh sync.Map // id → struct{}
	pulls PullConfig
}

// NewEngine connects to the engine at host (empty: the client's environment and defaults)
// and checks that it answers; pulls is how it pulls images (zero: the defaults). An engine that does not answer is an error naming the address,
// wrapping ErrUnavailable — and the Engine is returned anyway, so the agent can run without
// it and keep asking; a misconfigured host gives no Engine.
func NewEngine(ctx context.Context, host, agentID string, pulls PullConfig) (*Engine, error) {
	if err := CheckPullPolicy(pulls.DefaultPolicy); err != nil {
		return nil, fmt.Errorf("--pull-policy: %w", err)
	}
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("--docker-host %q: %w", host, err)
	}
	e := &Engine{cli: cli, agent: agentID, host: cli.DaemonHost(), pulls: pulls.withDefaults()}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		if client.IsErrConnectionFailed(err) || errors.Is(err, context.DeadlineExceeded) {
			// Down, not misconfigured: the agent stays up without it and keeps asking (every
			// call says ErrUnavailable until it answers); the caller decides whether to say so.
			return e, fmt.Errorf("docker engine at %s does not answer: %w: %v", e.host, ErrUnavailable, err)
		}
		cli.Close()
		return nil, fmt.Errorf("docker engine at %s does not answer: %w", e.host, err)
	}
	return e, nil
}

func (e *Engine) Name() string { return "docker" }

// Host is the engine's address.
func (e *Engine) Host() string { return e.host }

func (e *Engine) wrap(op, what string, err error) error {
	if err == nil {
		return nil
	}
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%s %s: %w", op, what, ErrNotFound)
	}
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%s %s: docker engine at %s: %w: %v", op, what, e.host, ErrUnavailable, err)
	}
	return fmt.Errorf("%s %s: %w", op, what, err)
}

// Pull pulls the image only when the engine does not have it (PullImage, if-not-present).
func (e *Engine) Pull(ctx context.Context, image string) error {
	_, err := e.PullImage(ctx, image, event.PullIfNotPresent)
	return err
}

func (e *Engine) labels(task, name string) map[string]string {
	return map[string]string{LabelAgent: e.agent, LabelTask: task, LabelContainer: name}
}

// Create makes the task's container under a name derived from the task and container, so a
// crash between create and journaling its id never makes a second one: the engine refuses the
// name, and the container that holds it is found by its labels. (Creating first and finding
// only on a conflict saves a list of every container on each create.)
func (e *Engine) Create(ctx context.Context, spec CreateSpec) (string, error) {
	for k := range spec.Container.Env {
		// A journal from before PROTOCOL.md 1.1 may hold a name like "PATH=/evil:", which
		// Docker would read as PATH: refuse it here too.
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return "", fmt.Errorf("create %s: env name %q is empty or holds \"=\" or NUL", Name(spec.Task, spec.Container.Name), k)
		}
	}
	name := Name(spec.Task, spec.Container.Name)
	cfg, hc, err := containerConfig(spec, e.labels(spec.Task, spec.Container.Name))
	if err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	res, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	if cerrdefs.IsConflict(err) {
		// The name is taken: by our container, created by an agent that died before it could
		// journal the id — possibly still being created by the engine, not yet listed. Find
		// it; if it does not show, let the caller try again later rather than fail the task.
		for i := 0; i < 20; i++ {
			if st, ferr := e.Find(ctx, spec.Task, spec.Container.Name); ferr == nil {
				return st.ID, nil
			}
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
		return "", fmt.Errorf("create %s: name in use by a container not (yet) listed as ours: %w: %v", name, ErrUnavailable, err)
	}
	if err != nil {
		return "", e.wrap("create", name, err)
	}
	e.ours.Store(res.ID, struct{}{})
	e.fresh.Store(res.ID, struct{}{})
	return res.ID, nil
}

// ownKnown checks ownership with an inspect unless the container is already known as ours.
func (e *Engine) ownKnown(ctx context.Context, id string) error {
	if _, ok := e.ours.Load(id); ok {
		return nil
	}
	_, err := e.own(ctx, id)
	return err
}

// Start starts a container that never ran. Docker itself starts an exited container again;
// the guard (checkStart) refuses that with ErrAlreadyStarted, so a start re-dispatched after a
// failed commit or a restart never makes a second run.
//
// A container this process created and never asked to start is started without that
// inspect (see fresh): one engine call less on every task's way to RUNNING.
func (e *Engine) Start(ctx context.Context, id string) error {
	if _, never := e.fresh.LoadAndDelete(id); !never {
		st, err := e.own(ctx, id)
		if err != nil {
			return err
		}
		if running, err := checkStart(st); err != nil || running {
			return err
		}
	}
	_, err := e.cli.ContainerStart(ctx, id, client.ContainerStartOptions{})
	return e.wrap("start", id, err)
}

// Stop sends the container's stop signal (SIGTERM unless its spec named another) and kills
// it after its own stop_timeout_s when it was created with one, else after timeout.
func (e *Engine) Stop(ctx context.Context, id string, timeout time.Duration) error {
	c, _, err := e.inspect(ctx, id)
	if err != nil {
		return err
	}
	secs := int(math.Ceil(timeout.Seconds()))
	if c.Config != nil && c.Config.StopTimeout != nil {
		secs = *c.Config.StopTimeout
	}
	_, err = e.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &secs})
	return e.wrap("stop", id, err)
}

// Remove deletes the container with its anonymous volumes; gone already is success.
func (e *Engine) Remove(ctx context.Context, id string) error {
	if err := e.ownKnown(ctx, id); errors.Is(err, ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	_, err := e.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{RemoveVolumes: true, Force: true})
	if cerrdefs.IsNotFound(err) {
		err = nil
	}
	if err == nil {
		e.ours.Delete(id)
		e.fresh.Delete(id)
	}
	return e.wrap("remove", id, err)
}

// own inspects a container and refuses one that does not carry this agent's id.
func (e *Engine) own(ctx context.Context, id string) (State, error) {
	_, st, err := e.inspect(ctx, id)
	return st, err
}

// inspect is own with the engine's full answer, for the callers that need more than State.
func (e *Engine) inspect(ctx context.Context, id string) (container.InspectResponse, State, error) {
	res, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return container.InspectResponse{}, State{}, e.wrap("inspect", id, err)
	}
	c := res.Container
	var labels map[string]string
	if c.Config != nil {
		labels = c.Config.Labels
	}
	if labels[LabelAgent] != e.agent {
		return c, State{}, fmt.Errorf("container %s belongs to agent %q, not %q: %w", id, labels[LabelAgent], e.agent, ErrNotFound)
	}
	e.ours.Store(id, struct{}{})
	st := State{ID: c.ID, Task: labels[LabelTask], Container: labels[LabelContainer]}
	if s := c.State; s != nil {
		st.Running = s.Running
		st.Exited = !s.Running && (s.Status == container.StateExited || s.Status == container.StateDead)
		st.ExitCode, st.OOMKilled = s.ExitCode, s.OOMKilled
		st.FinishedAt, _ = time.Parse(time.RFC3339Nano, s.FinishedAt)
		// Docker's "never" is 0001-01-01T00:00:00Z, which parses to the zero time.
		st.StartedAt, _ = time.Parse(time.RFC3339Nano, s.StartedAt)
		if st.FinishedAt.Year() <= 1 {
			st.FinishedAt = time.Time{}
		}
		if st.StartedAt.Year() <= 1 {
			st.StartedAt = time.Time{}
		}
		if s.Running {
			st.Health = healthOf(s.Health)
			if c.NetworkSettings != nil {
				st.Bindings = bindingsOf(c.NetworkSettings.Ports)
			}
		}
	}
	return c, st, nil
}

func (e *Engine) Inspect(ctx context.Context, id string) (State, error) { return e.own(ctx, id) }

func (e *Engine) list(ctx context.Context, f client.Filters) ([]State, error) {
	res, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f.Add("label", LabelAgent+"="+e.agent)})
	if err != nil {
		return nil, e.wrap("list", "containers", err)
	}
	out := make([]State, 0, len(res.Items))
	for _, c := range res.Items {
		e.ours.Store(c.ID, struct{}{}) // listed under this agent's label
		st := State{ID: c.ID, Task: c.Labels[LabelTask], Container: c.Labels[LabelContainer]}
		st.Running = c.State == container.StateRunning
		st.Exited = c.State == container.StateExited || c.State == container.StateDead
		if st.Exited {
			// The list gives no exit code: inspect the ones that ended.
			if full, err := e.own(ctx, c.ID); err == nil {
				st = full
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b State) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (e *Engine) List(ctx context.Context) ([]State, error) { return e.list(ctx, client.Filters{}) }

func (e *Engine) Find(ctx context.Context, task, name string) (State, error) {
	list, err := e.list(ctx, client.Filters{}.Add("label", LabelTask+"="+task, LabelContainer+"="+name))
	if err != nil {
		return State{}, err
	}
	if len(list) == 0 {
		return State{}, fmt.Errorf("find %s: %w", Name(task, name), ErrNotFound)
	}
	return list[0], nil
}

// Close releases the client's connections.
func (e *Engine) Close() error { return e.cli.Close() }
