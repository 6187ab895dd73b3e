package runtime

import (
	"crypto/sha256"
	"fmt"
	"strings"
)

// Name is the runtime name of a task's container:
// agentd-<agent id>-<task id>-<container name>-<digest>, where agent id and task id are the
// readable tails of the agent id and the task ARN (only characters Docker allows in a name,
// at most nameAgentLen and nameTaskLen of them) and digest is the first 64 bits of SHA-256
// over the whole agent id and ARN, in hex. Two containers share a name only if they are the
// same container of the same task of the same agent, or SHA-256 collides in 64 bits: neither
// two ARNs (the 32-bit FNV of the names before broke in a second's search) nor one ARN on two
// agents sharing an engine (an agent re-registered under a new id while its old containers
// run) can take each other's names. The agent finds its containers by label, never by name,
// so containers made under the names of an older agent are still found and adopted.
func Name(agent, task, container string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(agent), agent) // length-prefixed: ("a", "b/c") and ("ab", "/c") differ
	h.Write([]byte(task))
	return fmt.Sprintf("agentd-%s-%s-%s-%x", nameTail(agent, "", nameAgentLen), nameTail(task, "/:", nameTaskLen), container, h.Sum(nil)[:8])
}

// The readable parts of a name are bounded, so a long ARN or agent id never makes a name
// nobody can read in `docker ps`; the digest carries the rest.
const (
	nameAgentLen = 24
	nameTaskLen  = 40
)

// nameTail is s after its last cut character (none: all of s), kept to the characters Docker
// allows in a container name, at most max of them from the end.
func nameTail(s, cut string, max int) string {
	if i := strings.LastIndexAny(s, cut); cut != "" && i >= 0 {
		s = s[i+1:]
	}
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		}
	}
	out := b.String()
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}
