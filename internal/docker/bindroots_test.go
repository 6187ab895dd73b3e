package docker

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
)

// bindTree makes a root with shared/ and inside/x, a file, links of every kind, and an
// outside directory holding a secret.
func bindTree(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root + "/shared", root + "/inside/x", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.WriteFile(outside+"/secret", []byte("secret"), 0o600))
	must(t, os.WriteFile(root+"/inside/file", []byte("f"), 0o644))
	must(t, os.Symlink(outside, root+"/shared/escape"))
	must(t, os.Symlink("/", root+"/shared/slash"))
	must(t, os.Symlink("../inside", root+"/shared/back-inside"))
	must(t, os.Symlink(root+"/inside", root+"/shared/abs-inside"))
	return root, outside
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestBindSourcesResolveOnlyBeneathTheirRootWithoutLinks(t *testing.T) {
	root, outside := bindTree(t)
	roots, err := OpenBindRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	defer roots.Close()
	for _, c := range []struct{ name, source, refused string }{
		{"the root itself", root, ""},
		{"a plain directory", root + "/inside/x", ""},
		{"a link at the last component, to outside", root + "/shared/escape", "a path component is a symbolic link"},
		{"a link at the last component, to /", root + "/shared/slash", "a path component is a symbolic link"},
		{"a link in the middle", root + "/shared/escape/sub", "a path component is a symbolic link"},
		{"a link back inside (relative)", root + "/shared/back-inside", "a path component is a symbolic link"},
		{"a link back inside (absolute)", root + "/shared/abs-inside/x", "a path component is a symbolic link"},
		{"a missing path", root + "/inside/nothing", "it does not exist"},
		{"a file", root + "/inside/file", "not a directory"},
		{"through a file", root + "/inside/file/x", "a path component is not a directory"},
		{"..", root + "/inside/../../outside", "not a clean path"},
		{"beside the root", root + "x", "not under an allowed root"},
		{"outside", outside, "not under an allowed root"},
	} {
		f, named, err := roots.Open(c.source)
		if c.refused == "" {
			if err != nil {
				t.Errorf("%s: %v; want opened", c.name, err)
				continue
			}
			if got, _ := os.Readlink("/proc/self/fd/" + itoa(f.Fd())); got != c.source {
				t.Errorf("%s: opened %q; want %q", c.name, got, c.source)
			}
			if named != root {
				t.Errorf("%s: root %q; want %q", c.name, named, root)
			}
			f.Close()
			continue
		}
		if err == nil {
			f.Close()
			t.Errorf("%s: %s opened; want refused (%s)", c.name, c.source, c.refused)
			continue
		}
		if !strings.Contains(err.Error(), c.refused) {
			t.Errorf("%s: %v; want %q", c.name, err, c.refused)
		}
		if strings.Contains(c.refused, "under an allowed root") {
			continue
		}
		if !strings.Contains(err.Error(), `beneath allowed root "`+root+`"`) {
			t.Errorf("%s: %v; want the root named", c.name, err)
		}
	}
}

func itoa(fd uintptr) string { return strconv.Itoa(int(fd)) }

// A root given through a link is resolved when it is opened: relinking it afterwards moves
// no source, under either of its names.
func TestABindRootIsResolvedOnceAtOpen(t *testing.T) {
	base := t.TempDir()
	must(t, os.MkdirAll(base+"/first/data", 0o755))
	must(t, os.MkdirAll(base+"/second/data", 0o755))
	must(t, os.WriteFile(base+"/first/data/which", []byte("first"), 0o644))
	must(t, os.Symlink(base+"/first", base+"/root"))
	roots, err := OpenBindRoots([]string{base + "/root"})
	if err != nil {
		t.Fatal(err)
	}
	defer roots.Close()
	if got := roots.Names(); len(got) != 2 || got[0] != base+"/root" || got[1] != base+"/first" {
		t.Fatalf("names %q; want as configured and as resolved", got)
	}
	// The operator's link now points elsewhere (or a local user who could write base did it).
	must(t, os.Remove(base+"/root"))
	must(t, os.Symlink(base+"/second", base+"/root"))
	for _, src := range []string{base + "/root/data", base + "/first/data"} {
		f, _, err := roots.Open(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		b, err := os.ReadFile("/proc/self/fd/" + itoa(f.Fd()) + "/which")
		f.Close()
		if err != nil || string(b) != "first" {
			t.Fatalf("%s read %q %v; want the directory the root named at open (first)", src, b, err)
		}
	}
	if _, _, err := roots.Open(base + "/second/data"); err == nil {
		t.Fatal("the relinked target opened as if it were a root")
	}
}

func TestBadBindRootsAreRefusedByName(t *testing.T) {
	base := t.TempDir()
	must(t, os.WriteFile(base+"/file", nil, 0o644))
	for _, p := range []string{"relative", "", base + "/missing", base + "/file"} {
		if _, err := OpenBindRoots([]string{p}); err == nil || !strings.Contains(err.Error(), "--allow-bind-root") || !strings.Contains(err.Error(), p) {
			t.Errorf("root %q: %v; want refused naming the flag and the root", p, err)
		}
	}
}

// The agent's bind volumes are reserved in the task rules and in the runtime alike.
func TestBindVolumePrefixIsReservedForTheAgent(t *testing.T) {
	if BindVolumePrefix != protocol.ReservedVolumePrefix {
		t.Fatalf("docker %q, protocol %q: the rules must reserve what the runtime makes", BindVolumePrefix, protocol.ReservedVolumePrefix)
	}
	spec := runtime.CreateSpec{Task: "t", Container: event.ContainerSpec{Name: "a", Image: "i",
		Mounts: []event.Mount{{Type: event.MountVolume, Source: BindVolumePrefix + "00", Target: "/x"}}}}
	if _, _, err := containerConfig(spec, nil, nil); err == nil || !strings.Contains(err.Error(), "agent's own") {
		t.Fatalf("a task volume named as the agent's bind volumes: %v; want refused", err)
	}
	spec.Container.Mounts[0] = event.Mount{Type: event.MountBind, Source: "/srv/x", Target: "/x"}
	if _, _, err := containerConfig(spec, nil, nil); err == nil {
		t.Fatal("a bind mount without its opened source reached the engine's request")
	}
	_, hc, err := containerConfig(spec, nil, map[int]string{0: BindVolumePrefix + "01"})
	if err != nil {
		t.Fatal(err)
	}
	if m := hc.Mounts[0]; m.Type != "volume" || m.Source != BindVolumePrefix+"01" || m.VolumeOptions == nil || !m.VolumeOptions.NoCopy {
		t.Fatalf("bind mount reaches the engine as %+v; want its volume, no copy", m)
	}
}

// A remote engine would read /proc/<pid>/fd/<n> on its own host: bind roots need the local
// engine's unix socket.
func TestBindRootsNeedTheLocalEngine(t *testing.T) {
	roots, err := OpenBindRoots([]string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer roots.Close()
	e, _ := NewEngine(t.Context(), "tcp://127.0.0.1:1", "agent-remote", PullConfig{})
	if e == nil {
		t.Fatal("no engine for an address that does not answer")
	}
	defer e.Close()
	if err := e.SetBindRoots(roots); err == nil || !strings.Contains(err.Error(), "--allow-bind-root") || !strings.Contains(err.Error(), "tcp://127.0.0.1:1") {
		t.Fatalf("bind roots on an engine over tcp: %v; want refused naming the flag and the address", err)
	}
	if err := e.SetBindRoots(nil); err != nil {
		t.Fatalf("no bind roots: %v", err)
	}
}

// A root inside another root is refused: tasks write under the outer one, and a task with a
// writable bind above the inner root can replace it by a link to "/" — which the next start
// of the agent would open as a root, giving every task that binds under it the host's files.
func TestNestedBindRootsAreRefused(t *testing.T) {
	base := t.TempDir()
	outer, inner := base+"/binds", base+"/binds/shared/sub"
	must(t, os.MkdirAll(inner, 0o755))
	if _, err := OpenBindRoots([]string{outer, inner}); err == nil || !strings.Contains(err.Error(), inner) || !strings.Contains(err.Error(), outer) {
		t.Errorf("roots %s and %s: %v; want refused naming both", outer, inner, err)
	}
	// The attack, as the task's container would do it (it sees binds/shared as its /data),
	// then the agent starts again with the same flags.
	must(t, os.Remove(inner))
	must(t, os.Symlink("/", inner))
	roots, err := OpenBindRoots([]string{outer, inner})
	if err == nil {
		defer roots.Close()
		if f, _, err := roots.Open("/etc"); err == nil {
			f.Close()
			t.Fatalf("after a task linked %s to /, the host's /etc opened as a bind source (roots %q)", inner, roots.Names())
		}
		t.Fatalf("roots %q: want refused", roots.Names())
	}
	if !strings.Contains(err.Error(), inner) {
		t.Errorf("refusal %v does not name %s", err, inner)
	}
	// The same directory twice, by two names, is one root given twice.
	must(t, os.Symlink(outer, base+"/alias"))
	if _, err := OpenBindRoots([]string{outer, base + "/alias"}); err == nil {
		t.Error("one directory as two roots: accepted")
	}
}

// TestABindRootLocalUsersCanReachIsRefused: a task with a writable bind writes as root, so a
// root any local user can walk to could hand them a setuid-root program. A root is taken only
// when it, or a directory above it, is closed to group and others and owned by root or the
// agent; otherwise the start is refused, naming the root and the fix.
func TestABindRootLocalUsersCanReachIsRefused(t *testing.T) {
	base := t.TempDir()
	top := filepath.Dir(base) // the test's own directory under $TMPDIR, 0700
	t.Cleanup(func() { os.Chmod(top, 0o700) })
	cases := []struct {
		name           string
		top, base, dir os.FileMode
		refused        bool
	}{
		{"closed above", 0o700, 0o755, 0o755, false},
		{"its parent closed", 0o755, 0o700, 0o755, false},
		// a task binding the root itself, writable, could chmod it open: only above counts
		{"the root itself closed", 0o755, 0o755, 0o700, true},
		{"group may search the root only", 0o755, 0o755, 0o750, true},
		{"others may search the root only", 0o755, 0o755, 0o701, true},
		{"open all the way", 0o755, 0o755, 0o755, true},
	}
	for i, c := range cases {
		dir := filepath.Join(base, strconv.Itoa(i))
		must(t, os.Mkdir(dir, 0o700))
		must(t, os.Chmod(dir, c.dir))
		must(t, os.Chmod(base, c.base))
		must(t, os.Chmod(top, c.top))
		roots, err := OpenBindRoots([]string{dir})
		switch {
		case c.refused && (err == nil || !strings.Contains(err.Error(), "--allow-bind-root \""+dir+"\": local users can reach it") || !strings.Contains(err.Error(), "setuid")):
			t.Errorf("%s: %v; want the root refused as reachable", c.name, err)
		case !c.refused && err != nil:
			t.Errorf("%s: %v; want it taken", c.name, err)
		}
		if err == nil {
			roots.Close()
		}
	}
	if os.Geteuid() == 0 { // a closed directory another user owns: its owner could open it again
		must(t, os.Chmod(top, 0o755))
		must(t, os.Chmod(base, 0o755))
		closed := filepath.Join(base, "nobodys")
		dir := filepath.Join(closed, "root") // closed above, but by uid 65534's directory
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.Chmod(closed, 0o700))
		must(t, os.Chown(closed, 65534, 65534))
		if roots, err := OpenBindRoots([]string{dir}); err == nil {
			roots.Close()
			t.Error("a root closed only by a directory uid 65534 owns was taken")
		}
	}
}

// TestABindRootOthersCouldRedirectIsRefused: a root named through a directory another user
// can write (or owns) is theirs to point elsewhere before the next start — a link there turned
// toward /root/.ssh would pass every other check (closed above, root's own) and hand tasks
// root's keys. Such a root is refused, naming the directory; one through a link in a directory
// only root can write is taken.
func TestABindRootOthersCouldRedirectIsRefused(t *testing.T) {
	base := t.TempDir() // closed above: its parent is 0700
	must(t, os.Chmod(base, 0o755))
	target := filepath.Join(base, "closed", "root")
	must(t, os.MkdirAll(target, 0o755))
	must(t, os.Chmod(filepath.Dir(target), 0o700))
	shared := filepath.Join(base, "shared")
	must(t, os.Mkdir(shared, 0o700))
	must(t, os.Chmod(shared, 0o777))
	must(t, os.Symlink(target, filepath.Join(shared, "root")))
	private := filepath.Join(base, "private")
	must(t, os.Mkdir(private, 0o755))
	must(t, os.Symlink(target, filepath.Join(private, "root")))

	if roots, err := OpenBindRoots([]string{filepath.Join(shared, "root")}); err == nil {
		roots.Close()
		t.Errorf("a root linked from a directory others can write was taken")
	} else if !strings.Contains(err.Error(), "directory "+shared+" on its path") {
		t.Errorf("refused as %v; want the writable directory named", err)
	}
	roots, err := OpenBindRoots([]string{filepath.Join(private, "root")})
	if err != nil {
		t.Fatalf("a root linked from a directory only root can write: %v; want it taken", err)
	}
	roots.Close()
	if os.Geteuid() == 0 {
		theirs := filepath.Join(base, "theirs")
		must(t, os.Mkdir(theirs, 0o755))
		must(t, os.Symlink(target, filepath.Join(theirs, "root")))
		must(t, os.Chown(theirs, 65534, 65534))
		if roots, err := OpenBindRoots([]string{filepath.Join(theirs, "root")}); err == nil {
			roots.Close()
			t.Errorf("a root linked from a directory uid 65534 owns was taken")
		}
	}
}

// TestBindRootsNameWhatTheyHold: the agent's own files must lie beneath no root (a task with a
// writable bind could rewrite them), whether named through a link or not made yet; a path
// beside a root, or one whose name only starts like it, lies beneath none.
func TestBindRootsNameWhatTheyHold(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	must(t, os.MkdirAll(filepath.Join(root, "data"), 0o755))
	must(t, os.Symlink(filepath.Join(root, "data"), filepath.Join(base, "data-link")))
	roots, err := OpenBindRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	defer roots.Close()
	for path, want := range map[string]string{
		root:                                   root,
		filepath.Join(root, "data"):            root,
		filepath.Join(base, "data-link"):       root,
		filepath.Join(base, "data-link", "db"): root,
		filepath.Join(root, "not", "made"):     root,
		filepath.Join(base, "rootless"):        "",
		base:                                   "",
		"":                                     "",
	} {
		if got := roots.Holds(path); got != want {
			t.Errorf("Holds(%q) = %q; want %q", path, got, want)
		}
	}
}

// The engine's socket is found where NewEngine finds it — --docker-host, else DOCKER_HOST,
// else the default — so run.go can refuse a bind root holding it; tcp has no path.
func TestTheEnginesSocketPath(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	for host, want := range map[string]string{
		"":                       "/var/run/docker.sock",
		"unix:///srv/run/d.sock": "/srv/run/d.sock",
		"tcp://127.0.0.1:2375":   "",
	} {
		if got, err := SocketPath(host); err != nil || got != want {
			t.Errorf("SocketPath(%q) = %q, %v; want %q", host, got, err, want)
		}
	}
	t.Setenv("DOCKER_HOST", "unix:///srv/env/d.sock")
	if got, err := SocketPath(""); err != nil || got != "/srv/env/d.sock" {
		t.Errorf("DOCKER_HOST unix:///srv/env/d.sock: %q, %v; want its path", got, err)
	}
	if _, err := SocketPath("no-scheme"); err == nil || !strings.Contains(err.Error(), "--docker-host") {
		t.Errorf("a bad host: %v; want an error naming --docker-host", err)
	}
}

// TestHoldsAPathResolvedThroughALinkInARoot: a path whose resolution passes through a link
// that lies beneath a root is held by that root, wherever the link points now — a task with a
// writable bind of the root can re-point it (at a socket of its own, in place of the Docker
// Engine's, which the agent dials again on every call).
func TestHoldsAPathResolvedThroughALinkInARoot(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	must(t, os.MkdirAll(root, 0o755))
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.WriteFile(filepath.Join(outside, "docker.sock"), nil, 0o600))
	must(t, os.Symlink(filepath.Join(outside, "docker.sock"), filepath.Join(root, "sock")))
	must(t, os.Symlink(filepath.Join(root, "sock"), filepath.Join(base, "docker.sock")))
	must(t, os.Symlink(root, filepath.Join(base, "root-link")))
	must(t, os.Symlink(filepath.Join("..", "outside"), filepath.Join(root, "out")))
	must(t, os.Symlink(filepath.Join(base, "root-link", "out"), filepath.Join(base, "run")))
	roots, err := OpenBindRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	defer roots.Close()
	for path, want := range map[string]string{
		filepath.Join(base, "docker.sock"):        root, // -> root/sock -> outside/docker.sock
		filepath.Join(base, "run", "docker.sock"): root, // -> root-link/out -> root/out -> ../outside
		filepath.Join(outside, "docker.sock"):     "",
	} {
		if got := roots.Holds(path); got != want {
			t.Errorf("Holds(%q) = %q; want %q", path, got, want)
		}
	}
}
