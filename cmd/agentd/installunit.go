package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/agentd/agentd/deploy"
)

// installUnitCmd writes the systemd unit that ships with this binary (deploy/agentd.service)
// and says what to run next; it changes nothing else (no daemon-reload, no enable), so it is
// safe to run by configuration management and its effect is one file.
type installUnitCmd struct {
	Dir    string `default:"/etc/systemd/system" help:"Directory to write agentd.service into."`
	Binary string `help:"Path of the agentd binary for ExecStart (default: the unit's /usr/local/bin/agentd)."`
	Force  bool   `help:"Replace an existing agentd.service."`
}

func (c *installUnitCmd) Run(kctx *kong.Context) error { return c.install(kctx.Stdout) }

func (c *installUnitCmd) install(w io.Writer) error {
	unit := deploy.Unit
	if c.Binary != "" {
		if !filepath.IsAbs(c.Binary) {
			return fmt.Errorf("--binary %q: must be an absolute path (systemd runs ExecStart without a PATH search)", c.Binary)
		}
		unit = []byte(strings.ReplaceAll(string(unit), "ExecStart=/usr/local/bin/agentd", "ExecStart="+c.Binary))
	}
	path := filepath.Join(c.Dir, "agentd.service")
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if c.Force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: pass --force to replace it", path)
	}
	if err != nil {
		return fmt.Errorf("--dir %s: %w", c.Dir, err)
	}
	if _, err := f.Write(unit); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	_, err = fmt.Fprintf(w, "wrote %s\nnext:\n"+
		"  settings in /etc/agentd/agentd.json, e.g. {\"backend\": \"https://…\", \"token_file\": \"/etc/agentd/token\"}; check: agentd run --print-config\n"+
		"  systemctl daemon-reload\n  systemctl enable --now agentd\n", path)
	return err
}
