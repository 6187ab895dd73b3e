package protocol

import (
	"encoding/base64"
	"strings"
)

// SealedPrefix starts an env value the agent sealed (package seal) before validating the task.
// It is restated here because seal depends on this package; seal's tests check they agree.
const SealedPrefix = "agentd-sealed:v1:"

// sealedOverhead is what sealing adds to a value: XChaCha20-Poly1305's nonce and tag.
const sealedOverhead = 24 + 16

// envValueLen is the length of an env value as the control plane sent it: the limit of 64 KiB
// of env is the sender's, so a value the agent sealed counts for its clear length.
func envValueLen(v string) int {
	if !strings.HasPrefix(v, SealedPrefix) {
		return len(v)
	}
	_, enc, ok := strings.Cut(v[len(SealedPrefix):], ":")
	if !ok {
		return len(v)
	}
	n := base64.RawURLEncoding.DecodedLen(len(enc)) - sealedOverhead
	if n < 0 {
		return len(v)
	}
	return n
}
