package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/kong"

	"github.com/agentd/agentd/deploy"
)

// installUnitCmd writes the systemd unit that ships with this binary (deploy/agentd.service)
// and says what to run next; it changes nothing else (no daemon-reload, no enable), so it is
// safe to run by configuration management and its effect is one file.
//
// It never writes through a symbolic link: a link at the unit's path (a masked unit is a link
// to /dev/null; a link to any other file would have that file overwritten) is refused, with or
// without --force, and the unit is written to a new file in the same directory and renamed
// into place, so even a link planted after the check is replaced, never followed.
type installUnitCmd struct {
	Dir    string `default:"/etc/systemd/system" help:"Directory to write agentd.service into."`
	Binary string `help:"Path of the agentd binary for ExecStart (default: the unit's /usr/local/bin/agentd). Spaces are quoted for systemd; quotes, backslashes, '$' and control characters are refused."`
	Force  bool   `help:"Replace an existing agentd.service (a regular file; never a symbolic link)."`
}

func (c *installUnitCmd) Run(kctx *kong.Context) error { return c.install(kctx.Stdout) }

func (c *installUnitCmd) install(w io.Writer) error {
	unit := deploy.Unit
	if c.Binary != "" {
		exec, err := systemdExecPath(c.Binary)
		if err != nil {
			return fmt.Errorf("--binary %q: %w", c.Binary, err)
		}
		unit = []byte(strings.ReplaceAll(string(unit), "ExecStart=/usr/local/bin/agentd", "ExecStart="+exec))
	}
	path := filepath.Join(c.Dir, "agentd.service")
	switch fi, err := os.Lstat(path); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("--dir %s: %w", c.Dir, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		if target == "/dev/null" {
			return fmt.Errorf("%s is a symbolic link to /dev/null: the unit is masked, and install-unit does not unmask it; "+
				"run `systemctl unmask agentd` first, then install-unit again", path)
		}
		return fmt.Errorf("%s is a symbolic link to %s: install-unit never writes through a link (it would overwrite %s); "+
			"remove the link (rm %s) and run install-unit again, or edit the file it names yourself", path, target, target, path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s exists and is not a regular file (%s): remove it first", path, fi.Mode().Type())
	case !c.Force:
		return fmt.Errorf("%s exists: pass --force to replace it", path)
	}
	if err := writeUnit(path, unit, c.Force); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "wrote %s\nnext:\n"+
		"  settings in /etc/agentd/agentd.json, e.g. {\"backend\": \"https://…\", \"token_file\": \"/etc/agentd/token\"}; check: agentd run --print-config\n"+
		"  systemctl daemon-reload\n  systemctl enable --now agentd\n", path)
	return err
}

// writeUnit writes unit to a new file beside path (mode 0644, synced) and puts it in place:
// with replace, by rename (which replaces the directory entry, whatever it is by then, and
// never writes into the file or link it named); without, by link, which fails if anything
// took the name since the check.
func writeUnit(path string, unit []byte, replace bool) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".agentd.service.tmp-")
	if err != nil {
		return fmt.Errorf("--dir %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; left over after a failure
	_, werr := tmp.Write(unit)
	if werr == nil {
		werr = tmp.Chmod(0o644)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("%s: %w", path, werr)
	}
	if replace {
		err = os.Rename(tmp.Name(), path)
	} else {
		err = os.Link(tmp.Name(), path)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s exists: pass --force to replace it", path)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// systemdExecPath writes an absolute executable path as the first word of ExecStart, per
// systemd.service(5) "Command lines": a path with spaces is double-quoted (systemd splits words
// on whitespace), and '%' is doubled (a specifier otherwise). systemd refuses quotes,
// backslashes and control characters in an executable's name ("Executable name contains
// special characters"), so they are refused here with a reason; '$' is refused too: it is
// literal in the executable's name but expanded in argv[0], a difference not worth trusting.
func systemdExecPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", errors.New("must be an absolute path (systemd runs ExecStart without a PATH search)")
	}
	if !utf8.ValidString(p) {
		return "", errors.New("not valid UTF-8, which systemd requires of a unit file")
	}
	for _, r := range p {
		switch {
		case r < 0x20 || r == 0x7f:
			return "", fmt.Errorf("has the control character %U, which systemd refuses in an executable's name", r)
		case r == '"' || r == '\'' || r == '\\':
			return "", fmt.Errorf("has %q, which systemd refuses in an executable's name: move the binary to a plainer path", r)
		case r == '$':
			return "", errors.New("has '$', which systemd expands as a variable in a command line: move the binary to a plainer path")
		}
	}
	p = strings.ReplaceAll(p, "%", "%%")
	if strings.ContainsRune(p, ' ') {
		p = `"` + p + `"`
	}
	return p, nil
}
