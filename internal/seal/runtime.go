package seal

import (
	"context"
	"fmt"

	"github.com/agentd/agentd/internal/runtime"
)

// OpeningRuntime wraps a runtime so that Create gets env values opened; every other call
// passes through (the embedded runtime.Runtime). The clear values exist only for the call to the real runtime.
type OpeningRuntime struct {
	runtime.Runtime
	Key *Key
}

// Create opens the spec's env and creates the container. A value that cannot be opened fails
// this create (the engine records the container STOPPED with this reason, which names the
// container, the env name and the key file, never a value).
func (r OpeningRuntime) Create(ctx context.Context, spec runtime.CreateSpec) (string, error) {
	env, err := r.Key.OpenEnv(spec.Container.Env)
	if err != nil {
		return "", fmt.Errorf("container %s of task %s: cannot open its env: %w (restore the key file that sealed it)", spec.Container.Name, spec.Task, err)
	}
	spec.Container.Env = env
	return r.Runtime.Create(ctx, spec)
}
