package seal

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentd/agentd/internal/datadir"
)

// KeyFileName is the key's file inside a data directory. It is never part of an export.
const KeyFileName = "seal.key"

const keyFileHeader = "agentd-seal-key v1"

// ErrNoKey is wrapped when the key file does not exist.
var ErrNoKey = errors.New("seal key file missing")

// keyFileLimit bounds the key file: the header and 44 characters of base64, with room to spare.
const keyFileLimit = 4096

// LoadKey reads the key file at path. The file must pass datadir.ReadPrivate's checks (a
// regular file, not a symlink, owned by the agent's uid, 0600 or stricter, small); anything
// else is refused with an error naming it.
func LoadKey(path string) (*Key, error) {
	b, _, err := datadir.ReadPrivate(path, keyFileLimit)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("seal key %s: %w", path, ErrNoKey)
	}
	if err != nil {
		return nil, fmt.Errorf("seal key %s: %w", path, err)
	}
	head, body, ok := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if !ok || strings.TrimSpace(head) != keyFileHeader {
		return nil, fmt.Errorf("seal key %s: damaged: does not start with %q", path, keyFileHeader)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(body))
	if err != nil {
		return nil, fmt.Errorf("seal key %s: damaged: %v", path, err)
	}
	return NewKey(raw, path)
}

// CreateKey makes a new random key and writes it to path, which must not exist (nor be a
// planted symlink), with mode 0600: written and synced under a temporary name, renamed into
// place, and the directory synced, so a power cut leaves the whole key or none. Written in
// place, a cut could leave an empty key file that every later start refused (issue 44).
func CreateKey(path string) (*Key, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("seal key %s: no randomness: %w", path, err)
	}
	k, err := NewKey(raw, path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("seal key %s: create: exists already (%v)", path, err)
	}
	tmp := path + ".new" // the data directory is the agent's alone: no one races for the name
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("seal key %s: create: %w", path, err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("seal key %s: create: %w", path, err)
	}
	content := keyFileHeader + "\n" + base64.StdEncoding.EncodeToString(raw) + "\n"
	_, werr := f.WriteString(content)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("seal key %s: write: %w", path, werr)
	}
	if err := datadir.SyncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("seal key %s: %w", path, err)
	}
	return k, nil
}
