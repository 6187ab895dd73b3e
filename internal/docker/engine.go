package docker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/bindroot"
	"github.com/agentd/agentd/internal/runtime"
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
	// ours holds the containers known to carry this agent's id — created by it, or inspected
	// or listed with its label — with the agent's bind volumes each uses. A container's labels
	// and mounts never change, so once known, remove need not inspect it again: one engine
	// call a step instead of two.
	ours sync.Map // id → []string (its bind volumes, engine_binds.go)
	// fresh holds the ids of containers this process created and has not yet asked to start:
	// such a container has never run, so its first start needs no inspect for the guard.
	// The first Start takes the id out before it calls the engine, so any later Start — a
	// re-dispatch after a failed commit, or after a call that timed out yet took effect —
	// inspects as before; a restart begins with the set empty.
	fresh sync.Map // id → struct{}
	pulls PullConfig
	// binds are the roots bind sources are opened beneath (nil: no bind mounts); bindVols the
	// descriptor each bind volume this process made names, held until the volume is removed
	// (engine_binds.go); bindLetGo those whose source was let go, the number kept (bindletgo.go).
	binds       *bindroot.Roots
	bindMu      sync.Mutex
	bindVols    map[string]*os.File
	bindLetGo   map[string]struct{}
	bindBound   *bindBound  // how many of bindVols may be open at once (bindbound.go; set with the roots)
	peerChecked atomic.Bool // the engine's socket is served from this pid and mount namespace, its data root beneath no bind root
	// claims are others' pulls, tags and loads of images, from the engine's events
	// (imageclaims.go); followed until Close.
	claims        *imageClaims
	stopFollowing context.CancelFunc
	// ident: Docker or Podman, as the engine last named itself (identify.go). probes runs the
	// containers' health checks in the agent, for an engine that runs none (Podman:
	// healthprobe.go); probeAlways makes it run them on Docker too (a test's).
	ident       identity
	probes      *probes
	probeAlways bool
	// limited holds the containers this process created under a memory limit; oom the ones
	// whose cgroup the kernel's OOM notification showed killed (oomwatch.go).
	limited sync.Map // id → struct{}
	oom     oomKills
}

var _ runtime.Runtime = (*Engine)(nil)

// NewEngine connects to the engine at host (empty: the client's environment and defaults)
// and checks that it answers; pulls is how it pulls images (zero: the defaults). An engine that does not answer is an error naming the address,
// wrapping ErrUnavailable — and the Engine is returned anyway, so the agent can run without
// it and keep asking; a misconfigured host gives no Engine.
func NewEngine(ctx context.Context, host, agentID string, pulls PullConfig) (*Engine, error) {
	if err := runtime.CheckPullPolicy(pulls.DefaultPolicy); err != nil {
		return nil, fmt.Errorf("--pull-policy: %w", err)
	}
	cli, err := newClient(host)
	if err != nil {
		return nil, err
	}
	e := &Engine{cli: cli, agent: agentID, host: cli.DaemonHost(), pulls: pulls.withDefaults(), bindVols: map[string]*os.File{}, bindLetGo: map[string]struct{}{}, probes: newProbes()}
	e.followClaims()
	e.ident.ctx, e.ident.stop = context.WithCancel(context.Background())
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		if client.IsErrConnectionFailed(err) || errors.Is(err, context.DeadlineExceeded) {
			// Down, not misconfigured: the agent stays up without it and keeps asking (every
			// call says ErrUnavailable until it answers); the caller decides whether to say so.
			e.lost(err)
			return e, fmt.Errorf("docker engine at %s does not answer: %w: %v", e.host, runtime.ErrUnavailable, err)
		}
		e.Close()
		return nil, fmt.Errorf("docker engine at %s does not answer: %w", e.host, err)
	}
	// Docker or Podman, from its own answers (identify.go): until it is named, the agent
	// keeps asking and stays unhealthy, naming the address.
	if err := e.startIdentifying(ctx); err != nil {
		return e, err
	}
	// Bind volumes an earlier process left unused name its dead descriptors: best effort (none
	// of them is ever started, checkBindMounts).
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	_ = e.sweepBindVolumes(sctx)
	return e, nil
}

// newClient is a client of the engine at host (empty: the client's environment — DOCKER_HOST
// and the rest — and defaults). It does not connect.
func newClient(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("--docker-host %q: %w", host, err)
	}
	return cli, nil
}

// SocketPath is the unix socket NewEngine(host) reaches the engine through — host, else
// DOCKER_HOST, else the default /var/run/docker.sock — or "" when it is reached otherwise
// (tcp: no path on this host). Whoever can bind that socket into a container is root on the
// host, so it must lie beneath no bind root (BindRoots.Holds).
func SocketPath(host string) (string, error) {
	cli, err := newClient(host)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	p, _ := strings.CutPrefix(cli.DaemonHost(), "unix://")
	if p == cli.DaemonHost() {
		return "", nil
	}
	return p, nil
}

func (e *Engine) Name() string { return "docker" }

// probing says whether the agent runs the health checks itself: on an engine that runs none.
func (e *Engine) probing(kind engineKind) bool {
	return e.probes != nil && (kind == kindPodman || e.probeAlways)
}

func (e *Engine) wrap(op, what string, err error) error {
	if err == nil {
		return nil
	}
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%s %s: %w", op, what, runtime.ErrNotFound)
	}
	if client.IsErrConnectionFailed(err) {
		e.lost(err) // it may be another engine when it answers again (identify.go)
		return fmt.Errorf("%s %s: docker engine at %s: %w: %v", op, what, e.host, runtime.ErrUnavailable, err)
	}
	return fmt.Errorf("%s %s: %w", op, what, err)
}

func (e *Engine) labels(task, name string) map[string]string {
	return map[string]string{runtime.LabelAgent: e.agent, runtime.LabelTask: task, runtime.LabelContainer: name}
}

// Create makes the task's container under a name derived from the agent, task and container, so a
// crash between create and journaling its id never makes a second one: the engine refuses the
// name, and the container that holds it is looked at (nameTaken). (Creating first and looking
// only on a conflict saves a list of every container on each create.)
func (e *Engine) Create(ctx context.Context, spec runtime.CreateSpec) (string, error) {
	for k := range spec.Container.Env {
		// A journal from before PROTOCOL.md 1.1 may hold a name like "PATH=/evil:", which
		// Docker would read as PATH: refuse it here too.
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return "", fmt.Errorf("create %s: env name %q is empty or holds \"=\" or NUL", runtime.Name(e.agent, spec.Task, spec.Container.Name), k)
		}
	}
	name := runtime.Name(e.agent, spec.Task, spec.Container.Name)
	if _, err := e.knownKind(); err != nil { // what it makes may depend on which engine runs it
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	if err := e.checkNamedVolumes(ctx, spec); err != nil { // engine_binds.go: no host directory by a volume's name
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	vols, err := e.makeBindVolumes(ctx, spec) // engine_binds.go: each bind source opened beneath its root
	if err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	cfg, hc, err := containerConfig(spec, e.labels(spec.Task, spec.Container.Name), vols)
	if err == nil {
		var res client.ContainerCreateResult
		if res, err = e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc}); err == nil {
			list := make([]string, 0, len(vols))
			for _, v := range vols {
				list = append(list, v)
			}
			e.ours.Store(res.ID, list)
			e.fresh.Store(res.ID, struct{}{})
			if spec.Container.MemoryMiB > 0 {
				e.limited.Store(res.ID, struct{}{})
			}
			return res.ID, nil
		}
	}
	// Not made (or made by an earlier call, found below): its volumes go. One the engine
	// still has (a create that timed out yet took effect) keeps its descriptor open.
	if len(vols) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		for _, v := range vols {
			_ = e.releaseVolume(rctx, v)
		}
		cancel()
	}
	if cfg == nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	if nameConflict(err) {
		return e.nameTaken(ctx, spec, name)
	}
	return "", e.wrap("create", name, err)
}

// nameConflict says whether the engine refused a create because the name is taken: Docker's
// 409, or Podman's 500 saying so ("that name is already in use").
func nameConflict(err error) bool {
	return cerrdefs.IsConflict(err) || err != nil && strings.Contains(err.Error(), "that name is already in use")
}

// nameTaken settles a create the engine refused because the name is taken, by the labels of
// the container that holds it. This agent's container of the same task and name (made by a
// call that timed out, or by an agent that died before it journaled the id) is the answer, as
// if made now. Any other holder is this container's failure — ErrNameTaken, naming the holder
// — never the runtime's: the engine answered, and only this task cannot have the name. A
// holder the engine does not show yet (still being created) is asked for again for a few
// seconds, then the call is a timeout: it may yet turn out ours, so it is made again later.
func (e *Engine) nameTaken(ctx context.Context, spec runtime.CreateSpec, name string) (string, error) {
	for i := 0; i < 20; i++ {
		res, err := e.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		if err == nil {
			c := res.Container
			var labels map[string]string
			if c.Config != nil {
				labels = c.Config.Labels
			}
			if labels[runtime.LabelAgent] == e.agent && labels[runtime.LabelTask] == spec.Task && labels[runtime.LabelContainer] == spec.Container.Name {
				e.ours.Store(c.ID, bindVolumesOf(c.Mounts))
				return c.ID, nil
			}
			whose := "not made by agentd"
			if a, ok := labels[runtime.LabelAgent]; ok {
				whose = fmt.Sprintf("not this agent's: made by agent %.64q", a) // a label anyone may set: bounded, quoted
			}
			return "", fmt.Errorf("create %s: %w: container %.12s holds it, %s", name, runtime.ErrNameTaken, c.ID, whose)
		}
		if !cerrdefs.IsNotFound(err) {
			return "", e.wrap("create", name, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("create %s: the name is taken by a container the engine does not show yet: %w", name, context.DeadlineExceeded)
}

// Start starts a container that never ran. Docker itself starts an exited container again;
// the guard (CheckStart) refuses that with ErrAlreadyStarted, so a start re-dispatched after a
// failed commit or a restart never makes a second run.
//
// A container this process created and never asked to start is started without that
// inspect (see fresh): one engine call less on every task's way to RUNNING.
func (e *Engine) Start(ctx context.Context, id string) error {
	kind, err := e.knownKind()
	if err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	if _, never := e.fresh.LoadAndDelete(id); !never {
		c, st, err := e.inspect(ctx, id)
		if err != nil {
			return err
		}
		if running, err := runtime.CheckStart(st); err != nil || running {
			return err
		}
		if err := e.checkBindMounts(c); err != nil { // engine_binds.go
			return err
		}
		if memoryLimited(c) {
			e.limited.Store(id, struct{}{})
		}
	}
	_, limited := e.limited.Load(id)
	if limited && kind == kindPodman { // Podman: its process made, and watched, before it runs
		if err := e.podmanInit(ctx, id); err == nil {
			e.watchStarting(ctx, id)
		}
	}
	_, err = e.cli.ContainerStart(ctx, id, client.ContainerStartOptions{})
	e.startAnswered(id, err) // engine_binds.go: the bind descriptors are needed no longer
	if err == nil && e.probing(kind) {
		e.ensureProbe(id)
	}
	if err == nil && limited {
		e.watchStarting(ctx, id)
	}
	return e.wrap("start", id, err)
}

// watchStarting watches the memory cgroup of the container's process for an OOM kill, once.
func (e *Engine) watchStarting(ctx context.Context, id string) {
	if c, _, err := e.inspect(ctx, id); err == nil && c.State != nil {
		e.watchOOM(id, c.State.Pid) // oomwatch.go: the kernel's word on an OOM kill
	}
}

// Stop sends the container's stop signal (SIGTERM unless its spec named another) and kills
// it after stopTimeout: its own stop_timeout_s is read back from the engine's record of it.
func (e *Engine) Stop(ctx context.Context, id string, timeout time.Duration) error {
	c, _, err := e.inspect(ctx, id)
	if err != nil {
		return err
	}
	secs := int(math.Ceil(runtime.StopTimeout(ownStopTimeout(c.Config), timeout).Seconds()))
	_, err = e.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &secs})
	return e.wrap("stop", id, err)
}

// Remove deletes the container with its anonymous volumes and its bind volumes (closing the
// descriptors they name); gone already is success. A container not yet known as ours is
// inspected first (ownership, and its bind volumes).
func (e *Engine) Remove(ctx context.Context, id string) error {
	var vols []string
	if v, ok := e.ours.Load(id); ok {
		vols = v.([]string)
	} else {
		c, _, err := e.inspect(ctx, id)
		if errors.Is(err, runtime.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		vols = bindVolumesOf(c.Mounts)
	}
	if err := e.forceRemove(ctx, id); err != nil {
		return e.wrap("remove", id, err)
	}
	e.fresh.Delete(id)
	e.limited.Delete(id)
	e.oom.forget(id)
	for _, v := range vols {
		if err := e.releaseVolume(ctx, v); err != nil {
			e.ours.Store(id, vols) // the next removal tries again (the container is gone)
			return fmt.Errorf("remove %s: %w", id, err)
		}
	}
	e.ours.Delete(id)
	return nil
}

// forceRemove removes the container, running or not; gone already is success. A forced remove
// of a container exiting at that moment fails: on Podman "container state improper", on Docker
// a 500 "Could not kill running container …, cannot remove - Container … is not running" (its
// kill found the container gone between its check and the kill). Docker's also fails while
// another removal of it is under way (a 409). Each is asked again, a bounded number of times, a
// little later each time; any other failure is returned at once.
func (e *Engine) forceRemove(ctx context.Context, id string) error {
	var err error
	for try := 0; ; try++ {
		_, err = e.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{RemoveVolumes: true, Force: true})
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		if err == nil || try == removeTries-1 || !removeRaced(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try+1) * 100 * time.Millisecond):
		}
	}
}

// removeRaced is whether a forced remove failed only because the container was exiting or being
// removed at that moment (forceRemove).
func removeRaced(err error) bool {
	return cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "container state improper") ||
		strings.Contains(err.Error(), "cannot remove - Container") && strings.HasSuffix(err.Error(), "is not running")
}

// removeTries bounds forceRemove: its waits add up to 1.5 s, far beyond the race it outlasts.
const removeTries = 6

// own inspects a container and refuses one that does not carry this agent's id.
func (e *Engine) own(ctx context.Context, id string) (runtime.State, error) {
	_, st, err := e.inspect(ctx, id)
	return st, err
}

// inspect is own with the engine's full answer, for the callers that need more than State.
func (e *Engine) inspect(ctx context.Context, id string) (container.InspectResponse, runtime.State, error) {
	res, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return container.InspectResponse{}, runtime.State{}, e.wrap("inspect", id, err)
	}
	c := res.Container
	var labels map[string]string
	if c.Config != nil {
		labels = c.Config.Labels
	}
	if labels[runtime.LabelAgent] != e.agent {
		return c, runtime.State{}, fmt.Errorf("container %s belongs to agent %q, not %q: %w", id, labels[runtime.LabelAgent], e.agent, runtime.ErrNotFound)
	}
	e.ours.Store(id, bindVolumesOf(c.Mounts))
	st := runtime.State{ID: c.ID, Task: labels[runtime.LabelTask], Container: labels[runtime.LabelContainer]}
	if s := c.State; s != nil {
		st.Running, st.Exited = phase(s.Status)
		st.ExitCode, st.OOMKilled = s.ExitCode, s.OOMKilled || e.oom.seen(c.ID)
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
			if kind, _ := e.kindNow(); e.probing(kind) {
				st.Health = e.probes.verdict(c.ID)
			}
			if c.NetworkSettings != nil {
				st.Bindings = bindingsOf(c.NetworkSettings.Ports)
			}
		}
	}
	return c, st, nil
}

func (e *Engine) Inspect(ctx context.Context, id string) (runtime.State, error) {
	return e.own(ctx, id)
}

// podmanStopped is Podman's state between its container's exit and its cleanup: the exit
// code and end time are known, and the die event has come (an inspect at the die reads it).
const podmanStopped container.ContainerState = "stopped"

// phase is the one mapping of Docker's container state to State's Running and Exited, for an
// inspect and a list alike. Running is Docker's own State.Running, which holds for a paused or
// restarting container too (its status string says which); created and removing are neither.
func phase(s container.ContainerState) (running, exited bool) {
	switch s {
	case container.StateRunning, container.StatePaused, container.StateRestarting:
		return true, false
	case container.StateExited, container.StateDead, podmanStopped:
		return false, true
	}
	return false, false
}

func (e *Engine) list(ctx context.Context, f client.Filters) ([]runtime.State, error) {
	res, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f.Add("label", runtime.LabelAgent+"="+e.agent)})
	if err != nil {
		return nil, e.wrap("list", "containers", err)
	}
	out := make([]runtime.State, 0, len(res.Items))
	for _, c := range res.Items {
		e.ours.Store(c.ID, bindVolumesOf(c.Mounts)) // listed under this agent's label
		st := runtime.State{ID: c.ID, Task: c.Labels[runtime.LabelTask], Container: c.Labels[runtime.LabelContainer]}
		st.Running, st.Exited = phase(c.State)
		if st.Running {
			st.Bindings = summaryBindings(c.Ports) // a restart's reconcile learns them here
		}
		if st.Exited {
			// The list gives no exit code: inspect the ones that ended.
			if full, err := e.own(ctx, c.ID); err == nil {
				st = full
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b runtime.State) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (e *Engine) List(ctx context.Context) ([]runtime.State, error) {
	return e.list(ctx, client.Filters{})
}

func (e *Engine) Find(ctx context.Context, task, name string) (runtime.State, error) {
	list, err := e.list(ctx, client.Filters{}.Add("label", runtime.LabelTask+"="+task, runtime.LabelContainer+"="+name))
	if err != nil {
		return runtime.State{}, err
	}
	if len(list) == 0 {
		return runtime.State{}, fmt.Errorf("find %s: %w", runtime.Name(e.agent, task, name), runtime.ErrNotFound)
	}
	return list[0], nil
}

// Close releases the client's connections and the descriptors of bind volumes.
func (e *Engine) Close() error {
	e.unfollowClaims()
	e.stopIdentifying()
	if e.probes != nil {
		e.probes.stop()
	}
	e.closeBindVolumes()
	return e.cli.Close()
}
