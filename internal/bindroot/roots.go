package bindroot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/datadir"
	"github.com/agentd/agentd/internal/event"
)

// Roots are the host directories under which tasks may bind-mount (--allow-bind-root),
// each opened once, at start, and held open for the agent's life.
//
// It protects DESIGN.md "What must hold" 12: a bind source reaches only what lies beneath its
// root as the root was opened at start, without following any link or crossing any mount —
// whenever a link, a rename or a mount appears in the root. A source is resolved from the
// root's descriptor with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|
// RESOLVE_NO_XDEV), the kubelet's answer to the same bug (CVE-2021-25741), and the runtime is handed the opened descriptor, never the
// string (internal/docker engine_binds.go): a link planted after the check cannot redirect the mount.
//
// A root given through a link is resolved once, when it is opened; relinking it later changes
// nothing. Sources may name a root by the name it was configured with or by the directory it
// resolved to.
type Roots struct {
	roots  []bindRoot
	mounts []mountEntry // the mount table when the roots were opened
}

type bindRoot struct {
	configured string     // as given to --allow-bind-root, cleaned
	resolved   string     // the directory it named when it was opened
	fs         fsLocation // that directory in its file system, whatever mount shows it
	f          *os.File   // O_PATH|O_DIRECTORY, held until Close
}

// Open opens each root: it must be an absolute path naming an existing directory.
// The name it resolved to is read back from the descriptor, so what is checked is what was
// opened (no window between resolving and opening). A bad root is an error naming it.
func Open(paths []string) (*Roots, error) {
	r := &Roots{}
	if len(paths) > 0 {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err == nil {
			r.mounts, err = parseMountinfo(string(b))
		}
		if err != nil {
			return nil, fmt.Errorf("--allow-bind-root: cannot read the mount table /proc/self/mountinfo (where else a root shows): %w", err)
		}
	}
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
			r.Close()
			return nil, fmt.Errorf("--allow-bind-root %q: want an absolute directory", p)
		}
		clean := filepath.Clean(p)
		fd, err := unix.Open(clean, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("--allow-bind-root %q: %w (want an existing directory)", p, err)
		}
		f := os.NewFile(uintptr(fd), clean)
		if err := datadir.CheckPathTrusted(clean); err != nil {
			f.Close()
			r.Close()
			return nil, fmt.Errorf("--allow-bind-root %q: %w (at the next start it could name another directory)", p, err)
		}
		resolved, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil || !filepath.IsAbs(resolved) {
			f.Close()
			r.Close()
			return nil, fmt.Errorf("--allow-bind-root %q: cannot read back the directory it opened (%q): %v", p, resolved, err)
		}
		r.roots = append(r.roots, bindRoot{configured: clean, resolved: resolved, f: f})
		if err := checkClosedToOthers(resolved); err != nil {
			r.Close()
			return nil, fmt.Errorf("--allow-bind-root %q: %w", p, err)
		}
		if r.roots[len(r.roots)-1].fs, err = checkOtherPaths(r.mounts, f, resolved); err != nil {
			r.Close()
			return nil, fmt.Errorf("--allow-bind-root %q: %w", p, err)
		}
	}
	if err := r.checkNotNested(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// checkClosedToOthers refuses a root that local users other than root and the agent can reach:
// a task with a writable bind writes as root, so it can leave a setuid-root program or a device
// node there, and any user who can walk to it could run it and own the host. The root is closed
// when a directory above it lets neither group nor others search it (no x for either) and
// belongs to root or the agent's uid (whoever owns it could open it again). The root itself
// closed is not enough: a task may bind the root itself, writable, and chmod it open.
func checkClosedToOthers(dir string) error { return closedAbove(dir, false) }

// closedAbove is checkClosedToOthers; with rootGroup a directory whose group is root (gid 0)
// may let its group search it — the Docker Engine's data root, 0710 root:root.
func closedAbove(dir string, rootGroup bool) error {
	if dir == "/" {
		return fmt.Errorf("local users can reach it: a task writes there as root and could leave a setuid program for them to run")
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			return fmt.Errorf("cannot read the mode of %s: %w", d, err)
		}
		shut := st.Mode&0o011 == 0 || rootGroup && st.Mode&0o001 == 0 && st.Gid == 0
		if shut && (st.Uid == 0 || int(st.Uid) == os.Geteuid()) {
			return nil
		}
		if d == "/" {
			return fmt.Errorf("local users can reach it (no directory from / to above %s is closed to group and others; the root's own mode does not count, as a task binding it could chmod it): a task writes there as root and could leave a setuid program for them to run; put the root inside a directory of mode 0700 (chmod go-x %s)", dir, filepath.Dir(dir))
		}
	}
}

// checkOtherPaths refuses a root that shows, whole or in part, at another path local users
// can reach: the same file system mounted twice, or a directory above the root (or the root,
// or one inside it) bind-mounted elsewhere, is the same directory under another name, and a
// setuid program a task leaves there runs from either (read-only or not: only nosuid stops
// it, and the rule does not weigh mount options). Each such path must be closed to others as
// checkClosedToOthers says. It returns where the root lies in its file system (for Holds).
func checkOtherPaths(mounts []mountEntry, f *os.File, dir string) (fsLocation, error) {
	holder := 0 // the mount holding what was opened, not what the path names now
	var stx unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err == nil && stx.Mask&unix.STATX_MNT_ID != 0 {
		holder = int(stx.Mnt_id)
	}
	loc, others, err := otherPaths(mounts, holder, dir)
	if err != nil {
		return loc, fmt.Errorf("cannot tell where else it shows: %w", err)
	}
	for _, o := range others {
		if err := closedAbove(o.path, o.engine); err != nil {
			return loc, fmt.Errorf("it also shows at %s, through the mount at %s of the same file system (device %s, its directory %s), and there %w; or unmount %s", o.path, o.mount.point, o.mount.dev, o.mount.root, err, o.mount.point)
		}
	}
	return loc, nil
}

// checkNotNested refuses a root that lies inside another (by either's name as configured or
// as resolved), or is the same directory: tasks write beneath a root, so one with a writable
// bind above an inner root can replace it by a link to any directory — "/" — and the next
// start would open that as a root. An inner root adds nothing the outer one does not allow.
func (r *Roots) checkNotNested() error {
	for i, a := range r.roots {
		for j, b := range r.roots {
			if i == j {
				continue
			}
			for _, inner := range []string{a.configured, a.resolved} {
				for _, outer := range []string{b.configured, b.resolved} {
					if _, ok := within(outer, inner); ok {
						return fmt.Errorf("--allow-bind-root %q (%s) lies inside --allow-bind-root %q (%s), or is the same directory: a task writing beneath the outer root could replace the inner one by a link to any host directory before the agent next starts; give the outer root only", a.configured, a.resolved, b.configured, b.resolved)
					}
				}
			}
		}
	}
	return nil
}

// Names are the names a source may use for the roots: each as configured and, where it
// differs, as resolved. They are what the task rules check lexically at arrival
// (protocol.NewRules), so a source plainly outside every root is refused before it is
// journaled as accepted.
func (r *Roots) Names() []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, b := range r.roots {
		out = append(out, b.configured)
		if b.resolved != b.configured {
			out = append(out, b.resolved)
		}
	}
	return out
}

// Holds names the root (as configured) beneath which path lies, or is, as its name resolves
// now ("" when none): the agent's own files — its data directory with the journal and the
// seal key, its token, CA and settings files, the Docker Engine's socket — must lie beneath
// none, or a task with a writable bind there could rewrite them (or, binding the socket, run
// as root on the host). A path not made yet is judged by where its nearest existing ancestor
// resolves. A path shown by another mount of a root's file system is judged by where it lies
// in that file system: beneath the root's directory there, the root holds it. A path resolved
// through a link that lies beneath a root is held by it too, wherever the link points now: a
// task can re-point it (and the engine's socket is dialled again on every call).
func (r *Roots) Holds(path string) string {
	if r == nil || path == "" {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	resolved, rest := abs, ""
	for {
		if rp, err := filepath.EvalSymlinks(resolved); err == nil {
			resolved = filepath.Join(rp, rest)
			break
		}
		if resolved == "/" {
			break
		}
		rest = filepath.Join(filepath.Base(resolved), rest)
		resolved = filepath.Dir(resolved)
	}
	links := linksOn(abs)
	for _, b := range r.roots {
		for _, p := range append([]string{resolved}, links...) {
			if loc, _, err := locate(r.mounts, p); err == nil && loc.dev == b.fs.dev {
				if _, ok := within(b.fs.path, loc.path); ok {
					return b.configured
				}
			}
		}
		for _, root := range []string{b.configured, b.resolved} {
			for _, p := range append([]string{abs, resolved}, links...) {
				if _, ok := within(root, p); ok {
					return b.configured
				}
			}
		}
	}
	return ""
}

// linksOn lists the symbolic links that resolving p (absolute) follows, each named by its
// directory resolved: whoever can write where a link lies can re-point it. A component that
// is not there ends nothing: the rest is walked by name.
func linksOn(p string) []string {
	var links []string
	todo := strings.Split(p, "/")
	cur := "/"
	for hops := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // cur holds no link: its parent is its directory
			continue
		}
		next := filepath.Join(cur, c)
		target, err := os.Readlink(next)
		if err != nil { // not a link, or not there
			cur = next
			continue
		}
		if hops++; hops > 40 { // the kernel's ELOOP bound
			return links
		}
		links = append(links, next)
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return links
}

// Close releases the roots' descriptors.
func (r *Roots) Close() error {
	if r == nil {
		return nil
	}
	for _, b := range r.roots {
		b.f.Close()
	}
	r.roots = nil
	return nil
}

// within returns source relative to root when source is root or lies under it lexically.
func within(root, source string) (string, bool) {
	if source == root {
		return ".", true
	}
	if root == "/" {
		return strings.TrimPrefix(source, "/"), strings.HasPrefix(source, "/")
	}
	rel, ok := strings.CutPrefix(source, root+"/")
	return rel, ok
}

// Open resolves a bind source beneath its root and returns the directory it names, opened
// O_PATH (the caller closes it), and the root's name as configured. It refuses, naming the
// root (the caller names the source): a source under no root, any symbolic link on the way (also one that
// points back inside: a link is a door that can be re-pointed later), a ".." component, a
// mount point crossed beneath the root (a mount, too, shows another directory under the
// root's name), a path that does not exist, and a source that is not a directory (the
// runtime mounts directories only). The longest matching root is used.
func (r *Roots) Open(source string) (*os.File, string, error) {
	var best *bindRoot
	var rel string
	if r != nil {
		for i := range r.roots {
			b := &r.roots[i]
			for _, name := range []string{b.configured, b.resolved} {
				if rl, ok := within(name, source); ok && (best == nil || len(rl) < len(rel)) {
					best, rel = b, rl
				}
			}
		}
	}
	if best == nil {
		if r == nil || len(r.roots) == 0 {
			return nil, "", fmt.Errorf("refused: this agent allows no bind mounts (--allow-bind-root)")
		}
		return nil, "", fmt.Errorf("refused: not under an allowed root (%s)", strings.Join(r.Names(), ", "))
	}
	refuse := func(why string) (*os.File, string, error) {
		return nil, best.configured, fmt.Errorf("refused beneath allowed root %q: %s", best.configured, why)
	}
	if rel != "." && !filepath.IsLocal(rel) || filepath.Clean(rel) != rel {
		return refuse("not a clean path inside the root (no \"..\", no \"//\")")
	}
	how := &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC,
		// NO_XDEV: a mount beneath the root shows whatever it mounts (a directory outside
		// every root, the engine's socket) under the root's name.
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	var fd int
	var err error
	for try := 0; try < 10; try++ {
		// EAGAIN: a rename raced the walk (the kernel could not prove it stayed beneath).
		if fd, err = unix.Openat2(int(best.f.Fd()), rel, how); !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return refuse(resolveError(err))
	}
	f := os.NewFile(uintptr(fd), source)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return refuse(err.Error())
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		f.Close()
		return refuse("not a directory (a bind source must be a directory)")
	}
	return f, best.configured, nil
}

// resolveError says in words why openat2 refused a path.
func resolveError(err error) string {
	switch {
	case errors.Is(err, unix.ELOOP):
		return "a path component is a symbolic link"
	case errors.Is(err, unix.EXDEV): // ".." is refused before: this is a mount crossed
		return "the path crosses a mount point beneath the root (a mount there can show any directory under the root's name; mount it outside the root and allow it as a root of its own)"
	case errors.Is(err, unix.ENOENT):
		return "it does not exist"
	case errors.Is(err, unix.ENOTDIR):
		return "a path component is not a directory"
	case errors.Is(err, unix.EACCES):
		return "permission denied"
	case errors.Is(err, unix.ENOSYS):
		return "this kernel has no openat2 (Linux 5.6 or later is needed for bind mounts)"
	}
	return err.Error()
}

// OpenMount opens mounts[i]'s source beneath its root; its error names the mount, its target,
// the source and the root — the words a task's STOPPED reason carries.
func (r *Roots) OpenMount(i int, m event.Mount) (*os.File, error) {
	f, _, err := r.Open(m.Source)
	if err != nil {
		return nil, fmt.Errorf("mounts[%d].source %q (target %q): %w", i, m.Source, m.Target, err)
	}
	return f, nil
}

// CheckSources resolves every bind source of a container beneath its root and lets go of
// it: the Docker runtime's rule, for a runtime that mounts nothing (the simulated one). A nil
// r allows no bind mount.
func (r *Roots) CheckSources(mounts []event.Mount) error {
	for i, m := range mounts {
		if m.Type != event.MountBind {
			continue
		}
		f, err := r.OpenMount(i, m)
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}
