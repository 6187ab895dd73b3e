package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/bindroot"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// Issue 22, item 1, on the real engine: a bind source that is — or becomes, at any moment — a
// link never gives a container anything outside its root. Each container runs `cat /data/f`;
// inside the root f says "inside", outside it says "secret".

type bindRig struct {
	e       *Engine
	agent   string
	root    string // the allowed root, with shared/
	outside string // a directory beside it holding f = "secret"
}

func newBindRig(t *testing.T) *bindRig {
	t.Helper()
	e, agent := dockerEngine(t)
	differsOnPodman(t, e, "--allow-bind-root is refused (TestDockerBindRootsAreRefusedOnPodman)")
	base := t.TempDir()
	r := &bindRig{e: e, agent: agent, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	must(t, os.MkdirAll(r.root+"/shared", 0o755))
	must(t, os.MkdirAll(r.outside, 0o755))
	must(t, os.WriteFile(r.outside+"/f", []byte("secret"), 0o644))
	roots, err := bindroot.Open([]string{r.root})
	if err != nil {
		t.Fatal(err)
	}
	must(t, e.SetBindRoots(roots))
	t.Cleanup(func() {
		// Every container of these tests is removed through the engine, which must take its
		// bind volumes along; removeAgentContainers then clears what a failure left.
		if left := agentVolumes(t, agent); len(left) > 0 {
			t.Errorf("bind volumes left behind: %v", left)
		}
		removeAgentContainers(t, agent)
		roots.Close()
	})
	return r
}

// insideDir makes ROOT/rel holding f = "inside".
func (r *bindRig) insideDir(t *testing.T, rel string) string {
	t.Helper()
	d := filepath.Join(r.root, rel)
	must(t, os.MkdirAll(d, 0o755))
	must(t, os.WriteFile(d+"/f", []byte("inside"), 0o644))
	return d
}

func agentVolumes(t *testing.T, agent string) []string {
	out, err := exec.Command("docker", "volume", "ls", "-q", "--filter", "label="+runtime.LabelAgent+"="+agent).Output()
	if err != nil {
		t.Errorf("docker volume ls: %v", err)
	}
	return strings.Fields(string(out))
}

func catSpec(name, src string) runtime.CreateSpec {
	return runtime.CreateSpec{Task: "task/binds", Container: event.ContainerSpec{Name: name, Image: testbox, Command: []string{"cat", "/data/f"},
		Mounts: []event.Mount{{Type: event.MountBind, Source: src, Target: "/data", ReadOnly: true}}}}
}

// seen starts a created container, returns what `cat /data/f` printed and removes it (with
// its bind volumes: the rig's cleanup fails the test on any volume left).
func (r *bindRig) seen(t *testing.T, id string) string {
	t.Helper()
	ctx := context.Background()
	if err := r.e.Start(ctx, id); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	st := waitExit(t, r.e, id)
	rc, err := r.e.Logs(ctx, id, runtime.LogOptions{Tail: -1})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &errOut, rc)
	rc.Close()
	if err := r.e.Remove(ctx, id); err != nil {
		t.Fatalf("remove %s: %v", id, err)
	}
	if st.ExitCode != 0 {
		return fmt.Sprintf("exit %d: %s", st.ExitCode, strings.TrimSpace(errOut.String()))
	}
	return out.String()
}

func TestDockerBindSourceLinkedBeforeCreateIsRefused(t *testing.T) {
	r := newBindRig(t)
	ctx := context.Background()
	must(t, os.Symlink(r.outside, r.root+"/shared/escape"))
	must(t, os.Symlink("/", r.root+"/shared/slash"))
	r.insideDir(t, "shared/dir")
	must(t, os.Symlink(r.root+"/shared/dir", r.root+"/shared/back-inside"))
	for i, link := range []string{"escape", "slash", "back-inside"} {
		src := r.root + "/shared/" + link
		_, err := r.e.Create(ctx, catSpec(fmt.Sprintf("c%d", i), src))
		want := fmt.Sprintf(`mounts[0].source %q (target "/data"): refused beneath allowed root %q: a path component is a symbolic link`, src, r.root)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("bind of %s: %v; want refused: %s", src, err, want)
		}
		if errors.Is(err, runtime.ErrUnavailable) || errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("refusal %v is not permanent", err)
		}
		if _, err := r.e.Find(ctx, "task/binds", fmt.Sprintf("c%d", i)); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("a refused create left a container: %v", err)
		}
	}
	if left := agentVolumes(t, r.agent); len(left) > 0 {
		t.Fatalf("refused creates left volumes %v", left)
	}
	if got := r.seen(t, mustCreate(t, r.e, catSpec("plain", r.root+"/shared/dir"))); got != "inside" {
		t.Fatalf("plain directory: the container saw %q", got)
	}
}

func mustCreate(t *testing.T, e *Engine, spec runtime.CreateSpec) string {
	t.Helper()
	id, err := e.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestDockerBindSourceSwappedBetweenCreateAndStartStaysTheOpenedDirectory(t *testing.T) {
	r := newBindRig(t)
	src := r.insideDir(t, "shared/x")
	id := mustCreate(t, r.e, catSpec("app", src))
	// After create, before start: the directory is moved away and a link to outside put in
	// its place (what a container with a writable bind of shared/ can do).
	must(t, os.Rename(src, src+".moved"))
	must(t, os.Symlink(r.outside, src))
	if b, _ := os.ReadFile(src + "/f"); string(b) != "secret" {
		t.Fatalf("the swap did not take: %s/f reads %q", src, b)
	}
	if got := r.seen(t, id); got != "inside" {
		t.Fatalf("container saw %q; want the directory opened at create (inside)", got)
	}
	if left := agentVolumes(t, r.agent); len(left) > 0 {
		t.Fatalf("removal left bind volumes %v", left)
	}
	r.e.bindMu.Lock()
	held := len(r.e.bindVols)
	r.e.bindMu.Unlock()
	if held != 0 {
		t.Fatalf("%d bind descriptors still held after the removal", held)
	}
}

// A loop exchanges a directory and a link to outside (renameat2 RENAME_EXCHANGE, atomic) while
// containers are created and started on it: each is refused at create or sees the inside.
func TestDockerBindSourceRacingLinkSwapNeverLeavesTheRoot(t *testing.T) {
	r := newBindRig(t)
	src := r.insideDir(t, "shared/s")
	link := r.root + "/shared/l"
	must(t, os.Symlink(r.outside, link))
	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(2 * time.Minute)
		for i := 0; i < 50_000_000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
			swaps.Add(1)
			// Paced, so creates find the directory about as often as the link; each state
			// still changes hundreds of times during one create and start.
			time.Sleep(time.Duration(i%3) * time.Millisecond)
		}
	}()
	var refused, inside int
	for i := 0; i < 10; i++ {
		id, err := r.e.Create(context.Background(), catSpec(fmt.Sprintf("c%d", i), src))
		if err != nil {
			if !strings.Contains(err.Error(), "refused beneath allowed root") {
				close(stop)
				wg.Wait()
				t.Fatalf("create %d: %v; want refused beneath the root or made", i, err)
			}
			refused++
			continue
		}
		got := r.seen(t, id)
		if got != "inside" {
			close(stop)
			wg.Wait()
			t.Fatalf("container %d saw %q while its source was swapped; want inside", i, got)
		}
		inside++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d exchanges; %d creates refused, %d containers saw only the inside", swaps.Load(), refused, inside)
	if swaps.Load() == 0 {
		t.Fatal("no exchange happened: the test proved nothing")
	}
}

// A container made by an earlier agent process (a crash between create and start) uses bind
// volumes naming that process's descriptors: it is never started. One with a bind by path (an
// agent from before bind sources were held open) neither.
func TestDockerBindMountsOfAnEarlierProcessAreNeverStarted(t *testing.T) {
	r := newBindRig(t)
	ctx := context.Background()
	id := mustCreate(t, r.e, catSpec("app", r.insideDir(t, "shared/x")))
	// The restarted agent: same id, new process state.
	later, err := NewEngine(ctx, "", r.agent, PullConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	must(t, later.SetBindRoots(r.e.binds))
	err = later.Start(ctx, id)
	if err == nil || !strings.Contains(err.Error(), "earlier agent process") || errors.Is(err, runtime.ErrAlreadyStarted) || errors.Is(err, runtime.ErrUnavailable) {
		t.Fatalf("start of an adopted container with bind volumes: %v; want a permanent refusal", err)
	}
	if got := dockerInspect(t, id, "{{.State.StartedAt}}"); !strings.HasPrefix(got, "0001-") {
		t.Fatalf("the refused container started at %s", got)
	}
	// Its removal by the later process removes its volumes too.
	must(t, later.Remove(ctx, id))
	if left := agentVolumes(t, r.agent); len(left) > 0 {
		t.Fatalf("removal by a later process left %v", left)
	}
	// A bind by path, labelled as this agent's.
	name := "agentd-bindpath-" + strings.ReplaceAll(r.agent, "_", "-")
	out, err := exec.Command("docker", "create", "--name", name, "--label", runtime.LabelAgent+"="+r.agent, "--label", runtime.LabelTask+"=task/old",
		"--label", runtime.LabelContainer+"=app", "-v", r.root+"/shared/x:/data", testbox, "cat", "/data/f").Output()
	if err != nil {
		t.Fatalf("docker create: %v", err)
	}
	old := strings.TrimSpace(string(out))
	if err := later.Start(ctx, old); err == nil || !strings.Contains(err.Error(), "by path") {
		t.Fatalf("start of a container with a bind by path: %v; want refused", err)
	}
	must(t, later.Remove(ctx, old))
}

// An agent restarted while a task with a bind mount runs takes its root again: the engine's
// mount of that task's bind volume, under its data root, is in the mount table then, showing
// a directory inside the root — not another way in for local users (engineBindVolume).
func TestDockerARootInUseIsTakenAgainAtRestart(t *testing.T) {
	r := newBindRig(t)
	ctx := context.Background()
	spec := catSpec("app", r.insideDir(t, "shared/x"))
	spec.Container.Command = nil // runs until stopped
	id := mustCreate(t, r.e, spec)
	defer r.e.Remove(ctx, id)
	must(t, r.e.Start(ctx, id))
	table, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	if !strings.Contains(string(table), "/volumes/"+BindVolumePrefix) {
		t.Fatalf("no mount of a bind volume while its task runs: this test proves nothing\n%s", table)
	}
	roots, err := bindroot.Open([]string{r.root})
	if err != nil {
		t.Fatalf("the root of a running task's bind, at restart: %v; want it taken", err)
	}
	roots.Close()
	must(t, r.e.Remove(ctx, id))
}

// At start the agent removes its bind volumes no container uses (a process that died between
// making them and making its container); another agent's, and any in use, stay.
func TestDockerUnusedBindVolumesAreSweptAtStart(t *testing.T) {
	r := newBindRig(t)
	ctx := context.Background()
	id := mustCreate(t, r.e, catSpec("app", r.insideDir(t, "shared/x")))
	inUse := bindVolumesOf(mustInspect(t, r.e, id))
	mk := func(name, agent string) {
		t.Helper()
		if out, err := exec.Command("docker", "volume", "create", "--label", runtime.LabelAgent+"="+agent, name).CombinedOutput(); err != nil {
			t.Fatalf("docker volume create: %v %s", err, out)
		}
	}
	dangling, other := BindVolumePrefix+"dead"+r.agent[len(r.agent)-6:], BindVolumePrefix+"other"+r.agent[len(r.agent)-6:]
	// Another agent's id holding this one's, and one held by it: neither is this agent's,
	// whatever the engine's filter lets through (Podman ORs it with dangling).
	partial := BindVolumePrefix + "partial" + r.agent[len(r.agent)-6:]
	mk(dangling, r.agent)
	mk(other, r.agent+"-other")
	mk(partial, r.agent[:len(r.agent)-1])
	defer exec.Command("docker", "volume", "rm", "-f", other, partial).Run()
	later, err := NewEngine(ctx, "", r.agent, PullConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	vols := map[string]bool{}
	for _, a := range []string{r.agent, r.agent + "-other", r.agent[:len(r.agent)-1]} {
		for _, v := range agentVolumes(t, a) {
			vols[v] = true
		}
	}
	if vols[dangling] || !vols[other] || !vols[partial] || len(inUse) != 1 || !vols[inUse[0]] {
		t.Fatalf("after the sweep: %v; want %s gone, %s, %s and the in-use %v kept", vols, dangling, other, partial, inUse)
	}
	must(t, r.e.Remove(ctx, id))
}

func mustInspect(t *testing.T, e *Engine, id string) []container.MountPoint {
	t.Helper()
	c, _, err := e.inspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c.Mounts
}

// The engine reads /proc/<agent pid>/fd in its own namespaces: an agent in a pid namespace
// of its own (a container) or a mount namespace of its own is refused, checked against who
// serves the engine's socket. The test binary runs itself under unshare(1) to be that agent.
func TestDockerBindRootsNeedTheEnginesNamespaces(t *testing.T) {
	if sock := os.Getenv("AGENTD_PEER_CHECK_SOCKET"); sock != "" {
		fmt.Printf("peer check: %v\n", bindroot.CheckSocketPeer("/proc", sock))
		return
	}
	e, _ := dockerEngine(t)
	sock := strings.TrimPrefix(e.Host(), "unix://")
	if err := bindroot.CheckSocketPeer("/proc", sock); err != nil {
		t.Fatalf("this test's own process: %v", err)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare(1) not installed")
	}
	for _, c := range []struct{ flags, want string }{
		{"--pid", "pid namespace"},
		{"--mount", "mount namespace"},
	} {
		cmd := exec.Command("unshare", c.flags, "--fork", os.Args[0], "-test.run=^TestDockerBindRootsNeedTheEnginesNamespaces$")
		cmd.Env = append(os.Environ(), "AGENTD_PEER_CHECK_SOCKET="+sock)
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "unshare failed") {
			t.Skipf("unshare %s not permitted here: %s", c.flags, out)
		}
		if !strings.Contains(string(out), "peer check: --allow-bind-root needs agentd in") || !strings.Contains(string(out), c.want) {
			t.Errorf("an agent under unshare %s: %s; want refused naming the %s", c.flags, out, c.want)
		}
	}
}

// TestDockerANamedVolumeThatIsAHostDirectoryIsRefused: a task may name a volume, and Docker
// mounts whatever volume has that name — one someone made with the local driver's bind options
// (device=/etc), or an NFS share, is a host directory outside every bind root. Before, the
// container read it ("secret"). A plain volume (one Docker makes at create) still mounts.
func TestDockerANamedVolumeThatIsAHostDirectoryIsRefused(t *testing.T) {
	r := newBindRig(t)
	ctx := context.Background()
	hostVol := fmt.Sprintf("agentd-test-hostdir-%d", time.Now().UnixNano())
	if out, err := exec.Command("docker", "volume", "create", "--opt", "type=none", "--opt", "o=bind", "--opt", "device="+r.outside, hostVol).CombinedOutput(); err != nil {
		t.Fatalf("docker volume create: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "volume", "rm", "-f", hostVol).Run() })
	volSpec := func(name, vol string) runtime.CreateSpec {
		return runtime.CreateSpec{Task: "task/binds", Container: event.ContainerSpec{Name: name, Image: testbox, Command: []string{"cat", "/data/f"},
			Mounts: []event.Mount{{Type: event.MountVolume, Source: vol, Target: "/data"}}}}
	}
	id, err := r.e.Create(ctx, volSpec("hostdir", hostVol))
	if err == nil {
		t.Fatalf("a volume naming a host directory was mounted: the container saw %q", r.seen(t, id))
	}
	if want := fmt.Sprintf("mounts[0].source: volume %q", hostVol); !strings.Contains(err.Error(), want) || errors.Is(err, runtime.ErrUnavailable) {
		t.Fatalf("refusal %v: want a permanent one naming %s", err, want)
	}
	plain := fmt.Sprintf("agentd-test-plain-%d", time.Now().UnixNano())
	t.Cleanup(func() { _ = exec.Command("docker", "volume", "rm", "-f", plain).Run() })
	if got := r.seen(t, mustCreate(t, r.e, volSpec("plain", plain))); !strings.Contains(got, "exit") {
		t.Fatalf("a fresh plain volume: the container saw %q; want cat's failure (an empty volume)", got)
	}
}

// Bind roots are refused on Podman: its bind volumes are not proven to stay beneath the root.
func TestDockerBindRootsAreRefusedOnPodman(t *testing.T) {
	e, _ := dockerEngine(t)
	if !onPodman(e) {
		t.Skip("on Docker bind roots are taken (the bind rig's tests)")
	}
	roots, err := bindroot.Open([]string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer roots.Close()
	if err := e.SetBindRoots(roots); err == nil || !strings.Contains(err.Error(), "not on Podman") {
		t.Fatalf("bind roots on Podman: %v; want refused, naming Podman", err)
	}
}
