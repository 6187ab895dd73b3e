package seal

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// KeyFileName is the key's file inside a data directory. It is never part of an export.
const KeyFileName = "seal.key"

const keyFileHeader = "agentd-seal-key v1"

// ErrNoKey is wrapped when the key file does not exist.
var ErrNoKey = errors.New("seal key file missing")

// LoadKey reads the key file at path. The file must be a regular file (not a symlink) that
// only its owner can read or write; anything else is refused with an error naming it.
func LoadKey(path string) (*Key, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("seal key %s: %w", path, ErrNoKey)
	}
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("seal key %s: is a symbolic link; refusing to follow it", path)
		}
		return nil, fmt.Errorf("seal key %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("seal key %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("seal key %s: not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("seal key %s: mode %04o lets others read it; want 0600 (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
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

// CreateKey makes a new random key and writes it to path, created exclusively (an existing
// file or a planted symlink is an error) with mode 0600, synced with its directory.
func CreateKey(path string) (*Key, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("seal key %s: no randomness: %w", path, err)
	}
	k, err := NewKey(raw, path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
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
	if werr != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("seal key %s: write: %w", path, werr)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return k, nil
}
