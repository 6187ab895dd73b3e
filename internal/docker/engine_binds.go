package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/bindroot"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// Bind mounts on the Docker Engine (issue 22): what reaches Docker is a directory the agent
// has opened, never a path string the engine would resolve again, later, through whatever
// links are there by then.
//
// Each bind source is opened beneath its root (bindroot.Roots.Open) at create, and handed to the
// engine as a local volume of its own (driver local, type=none, o=bind,
// device=/proc/<agent pid>/fd/<n>). dockerd mounts that volume in the host's mount namespace
// when the container starts, and the kernel resolves the magic link to the opened directory,
// whatever was renamed or linked since. (A /proc/<pid>/fd/<n> bind source directly does not
// work: runc mounts inside the container's new namespace, where the kernel refuses a bind of
// a mount from another namespace.)
//
// The invariants this file keeps:
//   - the descriptor a bind volume names stays open, in this process, until the engine has
//     mounted the volume for the container's start (or refused the start, or the volume is
//     removed): its number is never reused for anything else while the agent's start may
//     mount it. After the start nothing of the agent's mounts it again — a container is
//     started once, no restart policy is ever set, and checkBindMounts refuses a container
//     whose descriptors are gone — and the descriptor goes back to the bound (bindbound.go).
//     (A start by hand, `docker start` of a task's stopped container, would have the engine
//     resolve that number again, to whatever it names by then: as with the volumes of an
//     agent process that has died, only the agent may start its containers.)
//   - a container is started only if every bind volume it uses was made by this process
//     (bindVols): one made by an earlier agent process names a descriptor of a dead process,
//     or — with its pid reused — anything some other process has open; and a container with a
//     bind mount by path (made before this file existed) is never started;
//   - a task may not name the agent's bind volumes itself (BindVolumePrefix is reserved, here
//     and in the task rules);
//   - removing a container removes its bind volumes and closes their descriptors; at start the
//     agent removes its bind volumes that no container uses.

// BindVolumePrefix starts the name of every volume the agent makes for a bind mount. A task's
// own volume may not use it (protocol.ReservedVolumePrefix is the same string).
const BindVolumePrefix = bindroot.VolumePrefix

// LabelBindSource is put on a bind volume: the source the task asked for (for whoever lists
// volumes; the volume itself names the opened descriptor).
const LabelBindSource = "io.agentd.bind-source"

// SetBindRoots gives the engine the roots bind sources are resolved beneath (nil: no bind
// mount is allowed). Call it before the first Create. An engine reached other than through a
// unix socket is refused: a remote engine would read /proc/<pid>/fd/<n> on its own host,
// where that names some other process's file.
//
// It also checks who serves that socket (checkSocketPeer): a process outside this pid
// namespace, or in another mount namespace, refuses the roots; and that the engine's data
// root lies beneath none (a task binding it could rewrite other containers' configurations:
// root on the host, as with the socket); and that the engine is not Podman (checkPeer says why).
// An engine that does not answer, or is not named, yet is checked at the first bind mount
// instead.
func (e *Engine) SetBindRoots(r *bindroot.Roots) error {
	if e.bindBound == nil {
		e.bindBound = defaultBindBound()
	}
	if len(r.Names()) == 0 {
		e.binds = r
		return nil
	}
	if !strings.HasPrefix(e.host, "unix://") {
		return fmt.Errorf("--allow-bind-root needs the Docker Engine on this host, reached through its unix socket (it mounts bind sources through this process's descriptors); --docker-host is %s", e.host)
	}
	if err := e.checkPeer(r); err != nil && !errors.Is(err, runtime.ErrUnavailable) {
		return err
	}
	e.binds = r
	return nil
}

// checkPeer runs checkSocketPeer, and checks the engine's data root lies beneath none of r,
// until both have once succeeded.
func (e *Engine) checkPeer(r *bindroot.Roots) error {
	if e.peerChecked.Load() {
		return nil
	}
	// Named again after every loss of the engine (identify.go), so an engine that is Podman
	// now is refused whatever it was when the roots were set.
	if kind, err := e.knownKind(); err != nil {
		return err
	} else if kind == kindPodman {
		// Bind roots are refused on Podman (4.3): a bind volume there mounts a path again, not the
		// directory the agent opened. Docker's local volume driver calls mount(2) with the volume's
		// device, /proc/<agent pid>/fd/<n>, and the kernel follows that magic link to the opened
		// directory itself. Podman's runs mount(8) (`mount -o bind -t none /proc/<pid>/fd/<n> …`),
		// and util-linux canonicalizes a bind source first: it reads the link as a string — the
		// directory's path as of now — and resolves that string again, through whatever links are
		// on it by then, before calling mount(2) with the result. A task with a writable bind of a
		// directory above its source can put a link there: removing the source and linking
		// "<source> (deleted)" to /etc shows a container /etc, every time
		// (TestDockerBindVolumeOfARemovedDirectoryNeverMountsALinkInItsPlace), and exchanging the source with a link
		// races the same way (what TestDockerBindSourceRacingLinkSwapNeverLeavesTheRoot saw).
		// Making it safe would mean handing Podman a path no task can change (the directory mounted
		// by the agent beneath a root-only directory first): not done.
		return fmt.Errorf("--allow-bind-root: not on Podman (%s): its bind volumes mount the source's path again, through whatever links are on it by then, not the directory opened beneath the root", e.host)
	}
	if err := bindroot.CheckSocketPeer("/proc", strings.TrimPrefix(e.host, "unix://")); errors.Is(err, bindroot.ErrUnreachable) {
		return fmt.Errorf("%w: %w", runtime.ErrUnavailable, err)
	} else if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if dir, err := e.dataRoot(ctx); err != nil {
		return fmt.Errorf("--allow-bind-root: %w, so none can be shown to lie outside every bind root", err)
	} else if root := r.Holds(dir); root != "" {
		return fmt.Errorf("the Docker Engine's data root %s lies under --allow-bind-root %s: a task binding it could rewrite other containers' configurations, root on the host; keep it outside every bind root", dir, root)
	}
	e.peerChecked.Store(true)
	return nil
}

// makeBindVolumes opens every bind source of a spec beneath its root and makes its volume;
// it returns the volume of each bind mount by the mount's index. A source refused beneath
// its root is an error naming the mount, its target, the source and the root.
//
// It takes a descriptor of the bound (bindbound.go) for each bind mount before it opens any,
// and the one of each volume stays taken while the volume's descriptor is held.
func (e *Engine) makeBindVolumes(ctx context.Context, spec runtime.CreateSpec) (map[int]string, error) {
	n := 0
	for _, m := range spec.Container.Mounts {
		if m.Type == event.MountBind {
			n++
		}
	}
	if n == 0 {
		return nil, nil
	}
	if err := e.checkPeer(e.binds); err != nil {
		return nil, err
	}
	if e.bindBound != nil { // nil: no bind roots were given, and openBind refuses every source
		if err := e.bindBound.take(ctx, n); err != nil {
			return nil, err
		}
	}
	var vols map[int]string
	held := 0                                     // descriptors this call put in bindVols: each gives its own back
	defer func() { e.bindBound.give(n - held) }() // the rest of what it took
	fail := func(err error) (map[int]string, error) {
		for _, v := range vols {
			_ = e.releaseVolume(ctx, v)
		}
		return nil, err
	}
	for i, m := range spec.Container.Mounts {
		if m.Type != event.MountBind {
			continue
		}
		f, err := e.binds.OpenMount(i, m)
		if err != nil {
			return fail(err)
		}
		var nonce [8]byte
		_, _ = rand.Read(nonce[:])
		name := BindVolumePrefix + hex.EncodeToString(nonce[:])
		dev := "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(int(f.Fd()))
		e.bindMu.Lock()
		e.bindVols[name] = f // held before the engine can know the volume
		e.bindMu.Unlock()
		held++
		if vols == nil {
			vols = map[int]string{}
		}
		vols[i] = name
		labels := e.labels(spec.Task, spec.Container.Name)
		labels[LabelBindSource] = m.Source
		res, err := e.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Driver: "local", Labels: labels,
			DriverOpts: map[string]string{"type": "none", "o": "bind", "device": dev}})
		if err != nil {
			return fail(e.wrap("create bind volume for mounts["+strconv.Itoa(i)+"]", name, err))
		}
		if got := res.Volume.Options["device"]; got != dev || res.Volume.Labels[runtime.LabelAgent] != e.agent {
			delete(vols, i) // not ours to remove
			e.dropDescriptor(name)
			return fail(fmt.Errorf("create bind volume %s for mounts[%d]: the engine has another volume of that name (device %q)", name, i, got))
		}
	}
	return vols, nil
}

// checkNamedVolumes refuses a task's named volume that already exists and is not a plain one
// (the local driver, no options: a directory of the engine's own storage). A volume made with
// the local driver's bind options (type=none, o=bind, device=/etc) is a host directory, and
// one of another driver or with nfs/cifs options a share the host reaches: mounted by name,
// either would give the task what --allow-bind-root does not. One that does not exist yet is
// made plain by the engine at create. The error names the mount, the volume and its driver,
// never the options' values (a cifs password is one).
func (e *Engine) checkNamedVolumes(ctx context.Context, spec runtime.CreateSpec) error {
	for i, m := range spec.Container.Mounts {
		if m.Type != event.MountVolume || m.Source == "" {
			continue
		}
		res, err := e.cli.VolumeInspect(ctx, m.Source, client.VolumeInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return e.wrap("inspect volume", m.Source, err)
		}
		if v := res.Volume; v.Driver != "local" || len(v.Options) > 0 {
			keys := make([]string, 0, len(v.Options))
			for k := range v.Options {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			return fmt.Errorf("mounts[%d].source: volume %q (driver %s, options %s) is not a plain volume: it may name a host directory or share outside every --allow-bind-root; refused", i, m.Source, v.Driver, strings.Join(keys, ","))
		}
	}
	return nil
}

// releaseVolume removes a bind volume and then closes the descriptor it names. A volume the
// engine still has (in use, or the engine does not answer) keeps its descriptor: the error
// says so, and a later removal tries again.
func (e *Engine) releaseVolume(ctx context.Context, name string) error {
	e.bindMu.Lock()
	_, held := e.bindVols[name]
	e.bindMu.Unlock()
	if !held {
		// Made by an earlier agent process, or its descriptor let go after the container's
		// start: remove it only if it carries this agent's id.
		v, err := e.cli.VolumeInspect(ctx, name, client.VolumeInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return nil
		} else if err != nil {
			return e.wrap("inspect bind volume", name, err)
		}
		if v.Volume.Labels[runtime.LabelAgent] != e.agent {
			return nil
		}
	}
	_, err := e.cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return e.wrap("remove bind volume", name, err)
	}
	e.dropDescriptor(name)
	return nil
}

// dropDescriptor closes a bind volume's descriptor (its source's, or the placeholder's once let
// go: bindletgo.go), if this process holds it, and hands its places in the bound back.
func (e *Engine) dropDescriptor(name string) {
	e.bindMu.Lock()
	f, held := e.bindVols[name]
	_, let := e.bindLetGo[name]
	delete(e.bindVols, name)
	delete(e.bindLetGo, name)
	e.bindMu.Unlock()
	switch {
	case held && let:
		f.Close()
		e.bindBound.removed(1)
	case held:
		f.Close()
		e.bindBound.give(1)
	}
}

// startAnswered lets go of the descriptors of a container's bind volumes once a start call
// has ended in an answer (err: the engine's): started, the engine has mounted them; refused,
// the container is never started again (checkBindMounts). A start that timed out or did not
// reach the engine may still be mounting them: they stay held until NeverStarted or the
// container's removal.
func (e *Engine) startAnswered(id string, err error) {
	if err == nil || !ctxErr(err) && !client.IsErrConnectionFailed(err) {
		e.NeverStarted(id)
	}
}

// NeverStarted lets go of the sources of a container's bind volumes (runtime.Runtime): the agent
// will not start it (again) — its start was answered, or it was recorded stopped before it
// ever started. Their descriptor numbers stay, naming nothing the engine can mount, until the
// volumes are removed (bindletgo.go). Idempotent.
func (e *Engine) NeverStarted(id string) {
	if v, ok := e.ours.Load(id); ok {
		for _, name := range v.([]string) {
			e.letGo(name)
		}
	}
}

// ctxErr reports whether err is a call's context ending (the call's outcome unknown).
func ctxErr(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// bindVolumesOf lists the agent's bind volumes among a container's mounts.
func bindVolumesOf(mounts []container.MountPoint) []string {
	var out []string
	for _, m := range mounts {
		if m.Type == mount.TypeVolume && strings.HasPrefix(m.Name, BindVolumePrefix) {
			out = append(out, m.Name)
		}
	}
	return out
}

// checkBindMounts refuses to start a container whose bind mounts this process did not
// prepare: a bind by path (resolved by the engine at start, through any link planted since),
// or a bind volume made by an earlier agent process (the descriptor it names is gone, or —
// the pid reused — another process's). It reads both the engine's mount points and the
// create request's mounts, so neither alone can hide one.
func (e *Engine) checkBindMounts(c container.InspectResponse) error {
	type seen struct {
		typ                  mount.Type
		name, source, target string
	}
	var all []seen
	for _, m := range c.Mounts {
		all = append(all, seen{m.Type, m.Name, m.Source, m.Destination})
	}
	if c.HostConfig != nil {
		for _, m := range c.HostConfig.Mounts {
			all = append(all, seen{m.Type, m.Source, m.Source, m.Target})
		}
		for _, b := range c.HostConfig.Binds {
			src, target, _ := strings.Cut(b, ":")
			if strings.HasPrefix(src, "/") {
				all = append(all, seen{mount.TypeBind, "", src, target})
			} else {
				all = append(all, seen{mount.TypeVolume, src, src, target})
			}
		}
	}
	for _, m := range all {
		switch {
		case m.typ == mount.TypeBind:
			return fmt.Errorf("start %s: its bind mount of %q at %q is by path, made by an agent that did not hold bind sources open; not started (the path could lead anywhere by now)", c.ID, m.source, m.target)
		case m.typ == mount.TypeVolume && strings.HasPrefix(m.name, BindVolumePrefix):
			if !e.sourceHeld(m.name) {
				return fmt.Errorf("start %s: its bind mount at %q (volume %s) has no descriptor of its source held by this process (prepared by an earlier agent process, or let go after a start the engine answered); not started", c.ID, m.target, m.name)
			}
		}
	}
	return nil
}

// sweepBindVolumes removes this agent's bind volumes that no container uses: left by a
// process that died between making them and making its container, or after its container
// was removed by someone else. Best effort; they are harmless until used, and nothing of the
// agent's starts a container with one (checkBindMounts).
func (e *Engine) sweepBindVolumes(ctx context.Context) error {
	f := client.Filters{}.Add("label", runtime.LabelAgent+"="+e.agent).Add("dangling", "true")
	res, err := e.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return e.wrap("list", "bind volumes", err)
	}
	var errs []error
	for _, v := range res.Items {
		if !e.sweepable(v.Name, v.Labels) {
			continue
		}
		e.bindMu.Lock()
		_, held := e.bindVols[v.Name]
		e.bindMu.Unlock()
		if held {
			continue // this process's, its container being made
		}
		if _, err := e.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, e.wrap("remove bind volume", v.Name, err))
		}
	}
	return errors.Join(errs...)
}

// sweepable says whether the sweep may remove a listed volume: a bind volume by its name and
// this agent's by its label. The server's filter is not trusted for either: Podman ORs filters
// of different kinds, so its answer holds every dangling volume, any agent's.
func (e *Engine) sweepable(name string, labels map[string]string) bool {
	return strings.HasPrefix(name, BindVolumePrefix) && labels[runtime.LabelAgent] == e.agent
}

// closeBindVolumes closes every held descriptor (the engine is closing).
func (e *Engine) closeBindVolumes() {
	e.bindMu.Lock()
	names := make([]string, 0, len(e.bindVols))
	for name := range e.bindVols {
		names = append(names, name)
	}
	e.bindMu.Unlock()
	for _, name := range names {
		e.dropDescriptor(name)
	}
}
