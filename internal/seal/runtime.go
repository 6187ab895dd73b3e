package seal

import (
	"context"
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

// Unwrap is the runtime beneath, for callers that look for optional interfaces it has
// (health verdicts, logs).
func (r OpeningRuntime) Unwrap() docker.Runtime { return r.Runtime }
