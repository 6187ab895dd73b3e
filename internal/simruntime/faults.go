package simruntime

// The faults a test or the simulation hands the runtime: calls that fail before they take
// effect, that take effect and fail anyway (a timeout, a broken connection), or that are slow —
// Docker's behaviours the agent must survive. Pull faults are images.go's (SetPullFaults).

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Fault is what SetFaults makes of one call.
type Fault struct {
	// Delay is how long the call takes after it took effect (on the wall clock, cut short by
	// the caller's context — which then makes it an error, though the effect stands).
	Delay time.Duration
	// Err is returned after the call took effect: a timeout or a broken connection whose
	// request the engine still carried out.
	Err error
	// NoEffect fails the call before it takes effect (with Err, or a generic error).
	NoEffect bool
}

// SetFaults makes every later call (op is create, start, stop, remove or list) behave as f says.
// nil turns faults off.
func (s *Runtime) SetFaults(f func(op, id string) Fault) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// withFault runs effect (which takes the lock itself) as the faults say for op on id.
func (s *Runtime) withFault(ctx context.Context, op, id string, effect func() error) error {
	s.mu.Lock()
	faults := s.faults
	s.mu.Unlock()
	var f Fault
	if faults != nil {
		f = faults(op, id)
	}
	if f.NoEffect {
		if f.Err == nil {
			f.Err = fmt.Errorf("simulated failure before it took effect")
		}
		return fmt.Errorf("%s %s: %w", op, id, f.Err)
	}
	if err := effect(); err != nil {
		return err
	}
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%s %s: %w (the call took effect)", op, id, ctx.Err())
		}
	}
	if f.Err != nil {
		return fmt.Errorf("%s %s: %w (the call took effect)", op, id, f.Err)
	}
	return nil
}

func failsAt(image, step string) error {
	if strings.Contains(image, "fail-"+step) {
		return fmt.Errorf("%s %s: simulated failure (image name contains fail-%s)", step, image, step)
	}
	return nil
}
