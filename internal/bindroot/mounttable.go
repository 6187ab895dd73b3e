package bindroot

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// The mount table, read from /proc/self/mountinfo (proc_pid_mountinfo(5)), tells where else a
// bind root shows: a path check walks one path, but a file system mounted twice, or a parent
// of the root bind-mounted elsewhere, is the same directory under another name — one that may
// be open to local users while the configured one is closed (Open). It is parsed
// here rather than through github.com/moby/sys/mountinfo: the few fields needed take a few
// lines, and that module is not a dependency of this one.

// mountEntry is a line of the mount table: the fields the bind-root checks need.
type mountEntry struct {
	id, parent int
	dev        string // major:minor of the file system (one per superblock)
	root       string // the directory of the file system that shows at point
	point      string // where it shows, in this mount namespace
}

// fsLocation is a directory as its file system knows it, whatever path shows it.
type fsLocation struct {
	dev, path string
}

// exposure is another path at which a bind root, or a part of it, shows.
type exposure struct {
	path   string     // where local users could reach it
	mount  mountEntry // the mount it shows through
	engine bool       // named as the Docker Engine's mount of a bind volume (engineBindVolume)
}

// parseMountinfo reads the text of /proc/<pid>/mountinfo. Any line it cannot read is an
// error naming the line: the checks that use it would otherwise miss a mount.
func parseMountinfo(text string) ([]mountEntry, error) {
	var out []mountEntry
	for n, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		bad := func(why string) error {
			return fmt.Errorf("mount table line %d %q: %s", n+1, line, why)
		}
		f := strings.Split(line, " ")
		// id parent major:minor root point options [optional...] - fstype source superoptions
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 10 || sep < 0 || len(f)-sep < 3 {
			return nil, bad("want id, parent id, major:minor, root, mount point, options, optional fields, \"-\", type, source and super options")
		}
		var m mountEntry
		var err1, err2 error
		m.id, err1 = strconv.Atoi(f[0])
		m.parent, err2 = strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return nil, bad("mount ids are not numbers")
		}
		major, minor, ok := strings.Cut(f[2], ":")
		if _, err := strconv.ParseUint(major, 10, 32); !ok || err != nil {
			return nil, bad("device " + strconv.Quote(f[2]) + " is not major:minor")
		}
		if _, err := strconv.ParseUint(minor, 10, 32); err != nil {
			return nil, bad("device " + strconv.Quote(f[2]) + " is not major:minor")
		}
		m.dev = f[2]
		var err error
		if m.root, err = unescapeMountPath(f[3]); err != nil {
			return nil, bad("root: " + err.Error())
		}
		if m.point, err = unescapeMountPath(f[4]); err != nil {
			return nil, bad("mount point: " + err.Error())
		}
		if !strings.HasPrefix(m.point, "/") {
			return nil, bad("mount point is not an absolute path")
		}
		out = append(out, m)
	}
	return out, nil
}

// unescapeMountPath undoes the kernel's escapes in a mount table path: a space, tab, newline
// or backslash is written as a backslash and three octal digits (\040, \011, \012, \134).
func unescapeMountPath(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+3 >= len(s) {
			return "", fmt.Errorf("%q: a backslash not followed by three octal digits", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", fmt.Errorf("%q: a backslash not followed by three octal digits", s)
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// mountAt is the mount a lookup of p (absolute, clean, free of links) ends on: from the mount
// at / down through each mount met on the way, the topmost of a stack.
func mountAt(mounts []mountEntry, p string) (mountEntry, error) {
	type key struct {
		parent int
		point  string
	}
	on := map[key]mountEntry{}
	ids := map[int]bool{}
	for _, m := range mounts {
		on[key{m.parent, m.point}] = m
		ids[m.id] = true
	}
	var cur mountEntry
	found := false
	for _, m := range mounts {
		// The namespace's root mount: at /, its parent outside the table (or itself).
		if m.point == "/" && (!ids[m.parent] || m.parent == m.id) {
			cur, found = m, true
			break
		}
	}
	if !found {
		return cur, fmt.Errorf("the mount table has no mount at /")
	}
	descend := func(at string) {
		for i := 0; i < len(mounts); i++ { // a stack is at most as deep as the table
			m, ok := on[key{cur.id, at}]
			if !ok || m.id == cur.id {
				return
			}
			cur = m
		}
	}
	descend("/")
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			descend(p[:i])
		}
	}
	return cur, nil
}

// locate is where a path (absolute, clean, free of links) lies in its file system: the mount
// a lookup ends on, and the path below that mount's root.
func locate(mounts []mountEntry, p string) (fsLocation, mountEntry, error) {
	m, err := mountAt(mounts, p)
	if err != nil {
		return fsLocation{}, m, err
	}
	return locateIn(m, p)
}

// locateIn is where p, which mount m holds, lies in m's file system.
func locateIn(m mountEntry, p string) (fsLocation, mountEntry, error) {
	rel, ok := within(m.point, p)
	if !ok || !strings.HasPrefix(m.root, "/") {
		return fsLocation{}, m, fmt.Errorf("%s is not beneath the mount at %s (root %q) that holds it", p, m.point, m.root)
	}
	return fsLocation{dev: m.dev, path: path.Join(m.root, rel)}, m, nil
}

// otherPaths lists the paths, other than dir and those beneath it, at which dir or a part of
// it shows: every other mount of dir's file system whose root is dir's directory, one above
// it, or one inside it. holder is the id of the mount holding dir (0: the one a lookup of dir
// ends on). A path beneath dir is left out: reaching it means passing through dir's own path.
// Mounts of other file systems are not paths to dir, whatever they show (an overlay's layers
// are not followed). The Docker Engine's mounts of the agents' own bind volumes of dir or a
// directory inside it are marked (engineBindVolume): while a task runs they are in the mount
// table, and an agent restarted then must take its roots again — under the engine's data
// root, closed as Docker makes it (checkOtherPaths).
func otherPaths(mounts []mountEntry, holder int, dir string) (fsLocation, []exposure, error) {
	var h mountEntry
	var err error
	if holder == 0 {
		h, err = mountAt(mounts, dir)
	} else {
		found := false
		for _, m := range mounts {
			if m.id == holder {
				h, found = m, true
			}
		}
		if !found {
			err = fmt.Errorf("mount %d, which holds %s, is not in the mount table", holder, dir)
		}
	}
	if err != nil {
		return fsLocation{}, nil, err
	}
	loc, h, err := locateIn(h, dir)
	if err != nil {
		return loc, nil, err
	}
	var out []exposure
	seen := map[string]bool{}
	for _, m := range mounts {
		if m.id == h.id || m.dev != h.dev || !strings.HasPrefix(m.root, "/") {
			continue
		}
		_, inside := within(loc.path, m.root)
		var p string
		if rel, ok := within(m.root, loc.path); ok {
			p = path.Join(m.point, rel) // dir itself shows there
		} else if _, ok := within(loc.path, m.root); ok {
			p = m.point // a part of dir shows there
		} else {
			continue
		}
		if _, ok := within(dir, p); ok || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, exposure{path: p, mount: m, engine: inside && engineBindVolume(m.point)})
	}
	return loc, out, nil
}

// engineBindVolume says whether a mount point is where the Docker Engine's local driver mounts
// a bind volume an agent made (internal/docker engine_binds.go): DATA-ROOT/volumes/agentd-bind-<16 hex>/_data.
// It shows a bind source to the containers that use it, and to local users only as far as the
// engine's data root lets them — as it shows every task's plain volume, where tasks write as
// root too: the data root's own modes (0710 root:root, Docker's) are what keep those closed,
// and are checked (closedAbove), since the name alone proves nothing of where it lies.
// A task cannot name such a volume (protocol.ReservedVolumePrefix).
func engineBindVolume(point string) bool {
	rest, ok := strings.CutSuffix(point, "/_data")
	name := path.Base(rest)
	hex, named := strings.CutPrefix(name, VolumePrefix)
	if !ok || !named || len(hex) != 16 || path.Base(path.Dir(rest)) != "volumes" {
		return false
	}
	return strings.Trim(hex, "0123456789abcdef") == ""
}
