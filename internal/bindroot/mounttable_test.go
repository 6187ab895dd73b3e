package bindroot

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// host is the start of a mount table: the root file system on 254:0, and /proc.
const host = "26 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n" +
	"21 26 0:20 / /proc rw,relatime - proc proc rw\n"

// TestOtherPathsToABindRoot: the paths, besides its own, at which a bind root (or a part of
// it) shows are every other mount of its file system whose directory is the root's, one
// above it or one inside it — and nothing else: siblings, other devices and mounts reached
// through the root itself are not other ways in. The engine's mounts of bind volumes are
// marked as such.
func TestOtherPathsToABindRoot(t *testing.T) {
	for _, c := range []struct {
		name   string
		table  string
		holder int // 0: looked up
		dir    string
		want   []string
	}{
		{"no other mount", host, 0, "/srv/closed/binds", nil},
		{"the device mounted twice", host + "50 26 254:0 / /mnt/open rw - ext4 /dev/vda rw\n", 0,
			"/srv/closed/binds", []string{"/mnt/open/srv/closed/binds"}},
		{"a parent bind-mounted elsewhere", host + "51 26 254:0 /srv /mnt/open rw - ext4 /dev/vda rw\n", 0,
			"/srv/closed/binds", []string{"/mnt/open/closed/binds"}},
		{"the root itself bind-mounted elsewhere", host + "52 26 254:0 /srv/closed/binds /mnt/open/b ro - ext4 /dev/vda rw\n", 0,
			"/srv/closed/binds", []string{"/mnt/open/b"}},
		{"a part of the root bind-mounted elsewhere", host + "53 26 254:0 /srv/closed/binds/shared /mnt/s rw - ext4 /dev/vda rw\n", 0,
			"/srv/closed/binds", []string{"/mnt/s"}},
		{"a sibling, and one whose name only starts like the root", host +
			"54 26 254:0 /srv/closed/other /mnt/o rw - ext4 /dev/vda rw\n" +
			"55 26 254:0 /srv/closed/binds2 /mnt/b2 rw - ext4 /dev/vda rw\n", 0,
			"/srv/closed/binds", nil},
		{"other devices, at the same directories", host +
			"56 26 0:50 / /mnt/ovl rw - overlay overlay rw,lowerdir=/srv/closed/binds,upperdir=/u,workdir=/w\n" +
			"57 26 254:16 /srv /mnt/vdb rw - ext4 /dev/vdb rw\n" +
			"58 26 0:4 net:[4026531840] /run/netns/x rw - nsfs nsfs rw\n", 0,
			"/srv/closed/binds", nil},
		{"escaped spaces, tabs and backslashes", host + `59 26 254:0 /srv/my\040binds /mnt/open\011x\134y rw - ext4 /dev/vda rw` + "\n", 0,
			"/srv/my binds/sub", []string{"/mnt/open\tx\\y/sub"}},
		{"the root is a mount point: its directory elsewhere", host + "60 26 254:0 /data/binds /srv/binds rw - ext4 /dev/vda rw\n", 0,
			"/srv/binds", []string{"/data/binds"}},
		{"a mount inside the root, of a directory above it, is reached through the root", host +
			"60 26 254:0 /data/binds /srv/binds rw - ext4 /dev/vda rw\n" +
			"61 60 254:0 /data /srv/binds/up rw - ext4 /dev/vda rw\n", 60,
			"/srv/binds", []string{"/data/binds"}},
		{"the same directory mounted on itself (as /var/lib/docker here)", host + "44 26 254:0 /var/lib/docker /var/lib/docker rw shared:1 - ext4 /dev/vda rw\n", 0,
			"/var/lib/docker/binds", nil},
		{"a root on a file system stacked over another", host +
			"62 26 254:16 / /srv rw - ext4 /dev/vdb rw\n" +
			"63 62 0:30 / /srv rw - tmpfs tmpfs rw\n" +
			"64 26 0:30 / /mnt/t rw - tmpfs tmpfs rw\n" +
			"65 26 254:16 / /mnt/vdb rw - ext4 /dev/vdb rw\n", 0,
			"/srv/binds", []string{"/mnt/t/binds"}},
		{"a mount hidden under another is looked through by its id", host +
			"62 26 254:16 / /srv rw - ext4 /dev/vdb rw\n" +
			"63 62 0:30 / /srv rw - tmpfs tmpfs rw\n" +
			"65 26 254:16 / /mnt/vdb rw - ext4 /dev/vdb rw\n", 62,
			"/srv/binds", []string{"/mnt/vdb/binds"}},
		{"the engine's mounts of bind volumes of the root and inside it (a task running)", host +
			"44 26 254:0 /var/lib/docker /var/lib/docker rw shared:1 - ext4 /dev/vda rw\n" +
			"70 44 254:0 /srv/closed/binds /var/lib/docker/volumes/agentd-bind-0011223344556677/_data rw - ext4 /dev/vda rw\n" +
			"71 44 254:0 /srv/closed/binds/x /var/lib/docker/volumes/agentd-bind-8899aabbccddeeff/_data rw - ext4 /dev/vda rw\n", 0,
			"/srv/closed/binds", []string{"engine /var/lib/docker/volumes/agentd-bind-0011223344556677/_data",
				"engine /var/lib/docker/volumes/agentd-bind-8899aabbccddeeff/_data"}},
		{"mounts only named like the engine's bind volumes, or of a directory above the root", host +
			"72 26 254:0 /srv/closed/binds/x /var/lib/docker/volumes/agentd-bind-xyz/_data rw - ext4 /dev/vda rw\n" +
			"73 26 254:0 /srv/closed/binds/y /mnt/agentd-bind-0011223344556677/_data rw - ext4 /dev/vda rw\n" +
			"74 26 254:0 /srv/closed/binds/z /var/lib/docker/volumes/agentd-bind-0011223344556677/data rw - ext4 /dev/vda rw\n" +
			"75 26 254:0 /srv /var/lib/docker/volumes/agentd-bind-8899aabbccddeeff/_data rw - ext4 /dev/vda rw\n", 0,
			"/srv/closed/binds", []string{"/var/lib/docker/volumes/agentd-bind-xyz/_data", "/mnt/agentd-bind-0011223344556677/_data",
				"/var/lib/docker/volumes/agentd-bind-0011223344556677/data", "/var/lib/docker/volumes/agentd-bind-8899aabbccddeeff/_data/closed/binds"}},
		{"/ as a root", host + "50 26 254:0 / /mnt/open rw - ext4 /dev/vda rw\n", 0,
			"/", nil},
	} {
		mounts, err := parseMountinfo(c.table)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, others, err := otherPaths(mounts, c.holder, c.dir)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []string
		for _, o := range others {
			if o.engine { // checked against the engine's data root's modes (checkOtherPaths)
				got = append(got, "engine "+o.path)
				continue
			}
			got = append(got, o.path)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: other paths to %s: %q; want %q", c.name, c.dir, got, c.want)
		}
	}
	mounts, _ := parseMountinfo(host)
	if _, _, err := otherPaths(mounts, 99, "/srv/binds"); err == nil || !strings.Contains(err.Error(), "mount 99") {
		t.Errorf("a holder not in the table: %v; want an error naming it", err)
	}
}

// A mount table line that cannot be read is an error naming it, never a mount skipped.
func TestAMalformedMountTableIsAnError(t *testing.T) {
	for _, line := range []string{
		"26 1 254:0 / /",
		"26 1 254:0 / / rw,relatime ext4 /dev/vda rw",
		"26 1 254:0 / / rw - ext4",
		"x 1 254:0 / / rw - ext4 /dev/vda rw",
		"26 1 2540 / / rw - ext4 /dev/vda rw",
		"26 1 254:x / / rw - ext4 /dev/vda rw",
		`26 1 254:0 /a\04 / rw - ext4 /dev/vda rw`,
		`26 1 254:0 / /a\400 rw - ext4 /dev/vda rw`,
		`26 1 254:0 / /a\9999 rw - ext4 /dev/vda rw`,
		"26 1 254:0 / relative rw - ext4 /dev/vda rw",
	} {
		_, err := parseMountinfo(host + line + "\n")
		if err == nil || !strings.Contains(err.Error(), "line 3") {
			t.Errorf("%q: %v; want an error naming line 3", line, err)
		}
	}
	mounts, err := parseMountinfo("21 26 0:20 / /proc rw - proc proc rw\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mountAt(mounts, "/srv"); err == nil {
		t.Error("a table without / gave a mount")
	}
}

// Holds sees through other mounts: a path another mount of a root's file system shows lies
// beneath the root when its directory there does — the Docker socket bind-mounted out of a
// root, say, is bound with it.
func TestHoldsSeesThroughOtherMounts(t *testing.T) {
	mounts, err := parseMountinfo(host +
		"60 26 254:0 /data/binds /x-agentd-test/binds rw - ext4 /dev/vda rw\n" +
		"61 26 254:0 /data/binds/run /x-agentd-test/run rw - ext4 /dev/vda rw\n" +
		"62 26 0:30 / /x-agentd-test/tmp rw - tmpfs tmpfs rw\n")
	if err != nil {
		t.Fatal(err)
	}
	root := "/x-agentd-test/binds" // none of these paths exists here: Holds judges them as named
	r := &Roots{mounts: mounts, roots: []bindRoot{{configured: root, resolved: root, fs: fsLocation{"254:0", "/data/binds"}}}}
	for path, want := range map[string]string{
		"/x-agentd-test/run/docker.sock": root, // its directory is /data/binds/run
		"/data/binds/agentd":             root, // through the root file system's own mount
		"/x-agentd-test/binds/data":      root,
		"/data/other":                    "",
		"/x-agentd-test/tmp/binds":       "", // another file system
	} {
		if got := r.Holds(path); got != want {
			t.Errorf("Holds(%q) = %q; want %q", path, got, want)
		}
	}
}

// TestABindRootShownByAnotherMountIsRefused: a root closed above by its own path, whose
// parent is bind-mounted into a directory local users can walk to, is refused at start
// naming the root and the other mount — read-only or not (a setuid program runs from a
// read-only mount too) — and taken again once that mount is gone. It makes real mounts, so
// it needs root.
func TestABindRootShownByAnotherMountIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a bind mount needs root")
	}
	base := openTempDir(t)
	closed, open := filepath.Join(base, "closed"), filepath.Join(base, "open")
	mid := filepath.Join(closed, "mid")
	root := filepath.Join(mid, "root")
	must(t, os.MkdirAll(root, 0o755))
	must(t, os.Mkdir(open, 0o755))
	must(t, os.Chmod(closed, 0o700))
	roots, err := Open([]string{root})
	if err != nil {
		t.Fatalf("closed above by %s, no other mount: %v; want it taken", closed, err)
	}
	roots.Close()

	if err := unix.Mount(mid, open, "", unix.MS_BIND, ""); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			t.Skipf("mount not permitted here: %v", err)
		}
		t.Fatal(err)
	}
	mounted := true
	unmount := func() {
		if mounted {
			if err := unix.Unmount(open, 0); err != nil {
				unix.Unmount(open, unix.MNT_DETACH)
			}
			mounted = false
		}
	}
	t.Cleanup(unmount)
	for _, how := range []string{"read-write", "read-only"} {
		if how == "read-only" {
			must(t, unix.Mount("", open, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""))
		}
		roots, err := Open([]string{root})
		if err == nil {
			roots.Close()
			t.Fatalf("%s shown %s at %s/root, open to local users: the root was taken", mid, how, open)
		}
		for _, want := range []string{"--allow-bind-root \"" + root + "\"", "shows at " + open + "/root", "mount at " + open, "local users can reach it", "setuid"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: refused as %v; want %q", how, err, want)
			}
		}
	}
	// The mount inside a closed directory: the other path is closed too.
	unmount()
	inside := filepath.Join(closed, "inside")
	must(t, os.Mkdir(inside, 0o755))
	must(t, unix.Mount(mid, inside, "", unix.MS_BIND, ""))
	t.Cleanup(func() {
		if err := unix.Unmount(inside, 0); err != nil {
			unix.Unmount(inside, unix.MNT_DETACH)
		}
	})
	roots, err = Open([]string{root})
	if err != nil {
		t.Fatalf("%s shown again only inside %s (0700): %v; want it taken", mid, closed, err)
	}
	defer roots.Close()
	if got := roots.Holds(filepath.Join(inside, "root", "docker.sock")); got != root {
		t.Errorf("a socket under the root's other path: held by %q; want %q", got, root)
	}
}

// bindMount bind-mounts src at dst for the test's life, or skips the test where mounting is
// not permitted (not root, or a container without CAP_SYS_ADMIN).
func bindMount(t *testing.T, src, dst string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a bind mount needs root")
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			t.Skipf("mount not permitted here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, 0); err != nil {
			unix.Unmount(dst, unix.MNT_DETACH)
		}
	})
}

// TestABindSourceDoesNotCrossAMountBeneathItsRoot: a mount beneath a root shows whatever it
// mounts — a directory outside every root, the one holding the Docker Engine's socket — under
// the root's name. A task binding it would reach that directory (the engine's bind volume is
// of the opened directory itself), so a source is refused where its path crosses a mount
// point; the root itself, and what lies beside the mount, are still bound.
func TestABindSourceDoesNotCrossAMountBeneathItsRoot(t *testing.T) {
	root, outside := bindTree(t)
	must(t, os.Chmod(filepath.Dir(root), 0o700)) // closed above: the root is taken
	must(t, os.Mkdir(root+"/up", 0o755))
	bindMount(t, outside, root+"/up")
	roots, err := Open([]string{root})
	if err != nil {
		t.Fatalf("a closed root with a mount beneath it: %v; want it taken", err)
	}
	defer roots.Close()
	for _, source := range []string{root + "/up", root + "/up/sub"} {
		if source == root+"/up/sub" {
			must(t, os.Mkdir(outside+"/sub", 0o755))
		}
		f, _, err := roots.Open(source)
		if err == nil {
			got, _ := os.Readlink("/proc/self/fd/" + itoa(f.Fd()))
			f.Close()
			t.Fatalf("%s, the mount point of %s beneath the root: opened (%s); want refused", source, outside, got)
		}
		if !strings.Contains(err.Error(), "mount point") || !strings.Contains(err.Error(), `beneath allowed root "`+root+`"`) {
			t.Errorf("%s: %v; want refused as crossing a mount point, naming the root", source, err)
		}
	}
	for _, source := range []string{root, root + "/inside/x"} {
		f, _, err := roots.Open(source)
		if err != nil {
			t.Errorf("%s, beside the mount: %v; want opened", source, err)
			continue
		}
		f.Close()
	}
}

// TestAMountOnlyNamedLikeTheEnginesBindVolumeIsChecked: the engine's mounts of bind volumes
// are let through because the engine's data root is closed — a mount that only ends like one
// (DIR/volumes/agentd-bind-<hex>/_data) under a directory local users can walk to shows the
// root to them like any other, and is refused; under Docker's own modes (0710 root:root
// above) it is taken.
func TestAMountOnlyNamedLikeTheEnginesBindVolumeIsChecked(t *testing.T) {
	base := openTempDir(t)
	closed := filepath.Join(base, "closed")
	root := filepath.Join(closed, "root")
	must(t, os.MkdirAll(root+"/x", 0o755))
	must(t, os.Chmod(closed, 0o700))
	data := filepath.Join(base, "data-root")
	point := filepath.Join(data, "volumes", VolumePrefix+"0123456789abcdef", "_data")
	must(t, os.MkdirAll(point, 0o755))
	bindMount(t, root+"/x", point)

	roots, err := Open([]string{root})
	if err == nil {
		roots.Close()
		t.Fatalf("%s shown at %s, open to local users: the root was taken", root+"/x", point)
	}
	if !strings.Contains(err.Error(), "shows at "+point) || !strings.Contains(err.Error(), "local users can reach it") {
		t.Errorf("refused as %v; want the other path named", err)
	}
	must(t, os.Chmod(data, 0o710)) // as Docker makes its data root
	roots, err = Open([]string{root})
	if err != nil {
		t.Fatalf("the same mount under a data root of mode 0710 root:root: %v; want the root taken", err)
	}
	roots.Close()
}

// openTempDir is a temporary directory local users can walk to, all the way from /, or skips
// the test where a directory above it closes every path through it.
func openTempDir(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	top := filepath.Dir(base) // the test's own directory under $TMPDIR, 0700: opened here
	t.Cleanup(func() { os.Chmod(top, 0o700) })
	must(t, os.Chmod(top, 0o755))
	must(t, os.Chmod(base, 0o755))
	for p := base; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		must(t, unix.Stat(p, &st))
		if st.Mode&0o001 == 0 {
			t.Skipf("%s (mode %o) closes every path through it: no open directory to mount into", p, st.Mode&0o777)
		}
		if p == "/" {
			return base
		}
	}
}
