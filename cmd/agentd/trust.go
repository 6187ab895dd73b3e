package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/datadir"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/seal"
	"github.com/agentd/agentd/internal/simruntime"
)

// trustFlags are the flags of the trust boundary (README "Security").
type trustFlags struct {
	NewSealKey        bool          `env:"AGENTD_NEW_SEAL_KEY" help:"Accept a new seal key when the one that sealed the journal's env values is lost: tasks needing a lost value stop when created; nothing else is lost."`
	AllowPlainToken   bool          `env:"AGENTD_ALLOW_PLAIN_TOKEN" help:"Allow sending the bearer token over plain http:// to a backend that is not on loopback (it can be read on the wire)."`
	APITokenFile      string        `env:"AGENTD_API_TOKEN_FILE" help:"File holding the bearer token of the introspection API: needed for a --listen that is not loopback; on loopback it lets users other than root and the agent's read tasks, logs and the journal."`
	APIHost           []string      `name:"api-host" env:"AGENTD_API_HOST" placeholder:"NAME" help:"A host name the API answers to besides localhost and IP addresses (repeatable); a request naming any other Host gets 421 (DNS rebinding)."`
	APISocket         string        `name:"api-socket" env:"AGENTD_API_SOCKET" placeholder:"PATH|off" help:"The API's trusted local socket (0600): root and the agent's user read everything there, as agentd logs and journal --live do by default. Default: api.sock in --data-dir (a directory only the agent's user may write); off: none. Not served when --listen is itself a unix socket."`
	APIGroup          string        `name:"api-group" env:"AGENTD_API_GROUP" placeholder:"GROUP" help:"Group whose members may use the unix socket of --listen unix:PATH (mode 0660 instead of 0600)."`
	APIFollowIdle     time.Duration `name:"api-follow-idle" default:"5m" env:"AGENTD_API_FOLLOW_IDLE" help:"A followed container log that writes nothing for this long is ended (its slot freed; agentd logs says so)."`
	APIFollowLifetime time.Duration `name:"api-follow-lifetime" default:"1h" env:"AGENTD_API_FOLLOW_LIFETIME" help:"A followed container log is ended after this long, however much it writes."`
}

// apiSocket is the path of the trusted local socket, "" for none (--api-socket off).
func (f trustFlags) apiSocket(dataDir string) string {
	switch f.APISocket {
	case "off":
		return ""
	case "":
		return filepath.Join(dataDir, apiSocketName)
	}
	return f.APISocket
}

// checkAPISocketDir refuses a socket directory that someone other than root and the agent
// could write to, or redirect: there they could take the socket's name before the agent and
// keep its trusted socket from being served (the clients would refuse theirs, but the agent
// would stay degraded for good). The data directory passes: it is checked to be 0700.
func checkAPISocketDir(sock string) error {
	dir := filepath.Dir(sock)
	if err := datadir.CheckPathTrusted(dir); err != nil {
		return fmt.Errorf("--api-socket %s: %w", sock, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--api-socket %s: %w", sock, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && (fi.Mode().Perm()&0o022 != 0 || (st.Uid != 0 && int(st.Uid) != os.Geteuid())) {
		return fmt.Errorf("--api-socket %s: directory %s (mode %04o, uid %d) may be written by others, who could take the socket's name first; give it a directory only root or the agent's user may write", sock, dir, fi.Mode().Perm(), st.Uid)
	}
	return nil
}

// apiSocketName is the trusted local socket's name in the data directory.
const apiSocketName = "api.sock"

// dataDirFiles are the agent's own files in its data directory: none may be a symlink.
var dataDirFiles = []string{journal.FileName, journal.FileName + ".pid", seal.KeyFileName, simruntime.FileName}

// openSealedJournal checks the data directory, opens the journal and its seal key, and seals
// what a journal written before sealing holds in the clear (then rewrites the file so no clear
// byte stays in its free pages).
func openSealedJournal(ctx context.Context, dir string, newKey bool) (*journal.Journal, *seal.Key, error) {
	if err := datadir.Prepare(dir, dataDirFiles...); err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, journal.FileName)
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		return nil, nil, err
	}
	key, scrub, err := seal.Setup(ctx, j, filepath.Join(dir, seal.KeyFileName), newKey)
	if err != nil {
		j.Close()
		return nil, nil, err
	}
	if !scrub {
		return j, key, nil
	}
	if err := j.Close(); err != nil {
		return nil, nil, err
	}
	if err := journal.Scrub(path); err != nil {
		return nil, nil, fmt.Errorf("sealing the env values of a journal written before sealing: %w", err)
	}
	if j, err = journal.Open(path, journal.Options{}); err != nil {
		return nil, nil, err
	}
	if err := seal.Commit(ctx, j, key); err != nil {
		j.Close()
		return nil, nil, err
	}
	return j, key, nil
}

// unsealer opens env values for `agentd journal dump --unseal`: only with the key file of a
// local data directory, never through --live (the key never leaves the host).
func unsealer(s journalSource) (func(event.Record) event.Record, error) {
	if s.Live != "" {
		return nil, fmt.Errorf("--unseal needs the seal key, which never leaves the agent's host: run it there with --data-dir instead of --live")
	}
	key, err := seal.LoadKey(filepath.Join(s.DataDir, seal.KeyFileName))
	if err != nil {
		return nil, fmt.Errorf("--unseal: %w", err)
	}
	return key.OpenRecord, nil
}
