// Package seal keeps env values — where users put API keys and passwords — out of the journal
// in the clear. A value is sealed with XChaCha20-Poly1305 (golang.org/x/crypto) under a
// per-agent key that lives in its own 0600 file beside the journal, never inside it, and is
// opened only to hand it to the container runtime.
//
// It promises:
//   - A sealed value is a printable string "agentd-sealed:v1:<key id>:<base64url>" that names
//     the key it was sealed under, so a value sealed under another key is named as such, never
//     misread; it is bound to its env name, so values cannot be swapped between names.
//   - Every value a payload carries is sealed before the engine sees the payload (Poll of
//     SealingControlPlane), so records, snapshots and exports hold env names in the clear and
//     values sealed; OpeningRuntime opens them just before the real runtime's Create.
//   - A value that cannot be opened (lost or replaced key, damage) fails that container's
//     create with a reason naming the container, the env name and the key file; nothing else.
package seal

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"
)

// Prefix starts every sealed value.
const Prefix = "agentd-sealed:v1:"

// KeySize is the size of a sealing key in bytes.
const KeySize = chacha20poly1305.KeySize

// Key is an agent's sealing key, with the file it came from (named in every error).
type Key struct {
	id   string // 8 hex digits of SHA-256(key): names the key in sealed values, reveals nothing
	aead interface {
		Seal(dst, nonce, plaintext, additionalData []byte) []byte
		Open(dst, nonce, ciphertext, additionalData []byte) ([]byte, error)
		NonceSize() int
		Overhead() int
	}
	path string
}

// NewKey makes a Key from raw bytes; path is only for error messages.
func NewKey(raw []byte, path string) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("seal key %s: %d bytes, want %d", path, len(raw), KeySize)
	}
	aead, err := chacha20poly1305.NewX(raw)
	if err != nil {
		return nil, fmt.Errorf("seal key %s: %w", path, err)
	}
	sum := sha256.Sum256(raw)
	return &Key{id: hex.EncodeToString(sum[:4]), aead: aead, path: path}, nil
}

// ID names the key; sealed values carry it.
func (k *Key) ID() string { return k.id }

// IsSealed reports whether v has the form of a sealed value.
func IsSealed(v string) bool { return strings.HasPrefix(v, Prefix) }

// Seal seals the value of env variable name. Every value is sealed, also one that already
// looks sealed (it comes from outside): opening gives back exactly what came in.
func (k *Key) Seal(name, value string) (string, error) {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(value)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: no randomness: %w", err)
	}
	box := k.aead.Seal(nonce, nonce, []byte(value), []byte(name))
	return Prefix + k.id + ":" + base64.RawURLEncoding.EncodeToString(box), nil
}

// ErrOtherKey is wrapped when a value was sealed under a key other than this one.
var ErrOtherKey = errors.New("sealed under another key")

// Open opens a sealed value of env variable name. A value without the sealed prefix comes from
// a journal written before sealing existed and is returned as it is.
func (k *Key) Open(name, value string) (string, error) {
	if !IsSealed(value) {
		return value, nil
	}
	id, enc, ok := strings.Cut(strings.TrimPrefix(value, Prefix), ":")
	if !ok {
		return "", fmt.Errorf("env %s: sealed value is damaged (no key id)", name)
	}
	if id != k.id {
		return "", fmt.Errorf("env %s: %w %s, but key file %s holds key %s", name, ErrOtherKey, id, k.path, k.id)
	}
	box, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(box) < k.aead.NonceSize()+k.aead.Overhead() {
		return "", fmt.Errorf("env %s: sealed value is damaged (not base64url of nonce and box)", name)
	}
	n := k.aead.NonceSize()
	clear, err := k.aead.Open(nil, box[:n], box[n:], []byte(name))
	if err != nil {
		return "", fmt.Errorf("env %s: sealed value does not open under key %s of %s (damaged or moved from another name)", name, k.id, k.path)
	}
	return string(clear), nil
}

// SealEnv returns env with every value sealed that is not yet: a clear value (from a journal
// written before sealing) is sealed, a sealed one kept. The input map is not modified.
func (k *Key) SealEnv(env map[string]string) (map[string]string, bool, error) {
	if len(env) == 0 {
		return env, false, nil
	}
	changed := false
	out := make(map[string]string, len(env))
	for name, v := range env {
		if IsSealed(v) {
			out[name] = v
			continue
		}
		s, err := k.Seal(name, v)
		if err != nil {
			return nil, false, err
		}
		out[name], changed = s, true
	}
	return out, changed, nil
}

// OpenEnv returns env with every value opened. The first value that cannot be opened is the
// error; the input map is not modified.
func (k *Key) OpenEnv(env map[string]string) (map[string]string, error) {
	if len(env) == 0 {
		return env, nil
	}
	out := make(map[string]string, len(env))
	for name, v := range env {
		c, err := k.Open(name, v)
		if err != nil {
			return nil, err
		}
		out[name] = c
	}
	return out, nil
}
