package runtime

import (
	"fmt"

	"github.com/agentd/agentd/internal/event"
)

// What a pull answers, and the pull policies every runtime honours (protocol.md §4).

// PullOutcome is what PullImage did.
type PullOutcome struct {
	// Digest is the content digest actually used, "sha256:…": the repo digest for an image
	// from a registry, the image id otherwise (an image built or loaded on the host).
	Digest string
	// ImageID is the engine's image id ("sha256:…"), which RemoveImage takes.
	ImageID string
	// Pulled says this call fetched the image from a registry: its id was absent before the
	// call, so the image is the agent's (image GC only ever removes such images). An image the
	// engine held under another name (an operator's digest-pinned pull) is not, whatever
	// reference the call found absent.
	Pulled bool
	// RefExisted says the reference named this very image before the call: the call made no
	// name, so collection never takes this one back.
	RefExisted bool
	// Note says what notable happened, e.g. a cached image used after a failed pull; never
	// a credential.
	Note string
}

// CheckPullPolicy refuses a policy protocol.md §4 does not name (empty is the default).
func CheckPullPolicy(policy string) error {
	switch policy {
	case "", event.PullAlways, event.PullIfNotPresent, event.PullNever:
		return nil
	}
	return fmt.Errorf("pull policy %q: want always, if-not-present or never", policy)
}
