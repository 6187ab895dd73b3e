package simruntime

import "context"

// Test hooks: what the tests of this package reach that the agent never calls.

// StartUnguarded is Docker's own start: an exited container runs again, as a new incarnation
// (its earlier exit stays in the exit stream). It is what Start guards against, kept so tests
// can show the guard is what stands between a re-dispatched start and a second run.
func (s *Runtime) StartUnguarded(ctx context.Context, id string) error {
	return s.start(ctx, id, false)
}
