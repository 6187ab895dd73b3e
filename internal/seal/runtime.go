package seal

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentd/agentd/internal/docker"
)

// OpeningRuntime wraps a runtime so that Create gets env values opened; every other call
// passes through. The clear values exist only for the call to the real runtime.
type OpeningRuntime struct {
	docker.Runtime
	Key *Key
}

// Create opens the spec's env and creates the container. A value that cannot be opened fails
// this create (the engine records the container STOPPED with this reason, which names the
// container, the env name and the key file, never a value).
func (r OpeningRuntime) Create(ctx context.Context, spec docker.CreateSpec) (string, error) {
	env, err := r.Key.OpenEnv(spec.Container.Env)
	if err != nil {
		return "", fmt.Errorf("container %s of task %s: cannot open its env: %w (restore the key file that sealed it)", spec.Container.Name, spec.Task, err)
	}
	spec.Container.Env = env
	return r.Runtime.Create(ctx, spec)
}

// PullWith passes a container's pull policy through to a runtime that honours one.
func (r OpeningRuntime) PullWith(ctx context.Context, image, policy string) error {
	if pp, ok := r.Runtime.(docker.PolicyPuller); ok {
		return pp.PullWith(ctx, image, policy)
	}
	return r.Runtime.Pull(ctx, image)
}

// PullImage passes a pull through to a runtime that says what it pulled; one that does not
// gets PullWith, and the outcome is empty.
func (r OpeningRuntime) PullImage(ctx context.Context, image, policy string) (docker.PullOutcome, error) {
	if ip, ok := r.Runtime.(docker.ImagePuller); ok {
		return ip.PullImage(ctx, image, policy)
	}
	return docker.PullOutcome{}, r.PullWith(ctx, image, policy)
}

// RemoveImage passes image removal through; a runtime without it removes nothing.
func (r OpeningRuntime) RemoveImage(ctx context.Context, imageID string, refs []string) error {
	if ic, ok := r.Runtime.(docker.ImageCollector); ok {
		return ic.RemoveImage(ctx, imageID, refs)
	}
	return fmt.Errorf("remove image %s: runtime %s does not remove images: %w", imageID, r.Runtime.Name(), errors.ErrUnsupported)
}

// ImageDiskFree passes the disk question through.
func (r OpeningRuntime) ImageDiskFree(ctx context.Context) (free, total uint64, err error) {
	if ic, ok := r.Runtime.(docker.ImageCollector); ok {
		return ic.ImageDiskFree(ctx)
	}
	return 0, 0, fmt.Errorf("runtime %s does not say its image disk: %w", r.Runtime.Name(), errors.ErrUnsupported)
}

var _ interface {
	docker.PolicyPuller
	docker.ImagePuller
	docker.ImageCollector
} = OpeningRuntime{}

// Unwrap is the runtime beneath, for callers that look for optional interfaces it has
// (health verdicts, logs).
func (r OpeningRuntime) Unwrap() docker.Runtime { return r.Runtime }
