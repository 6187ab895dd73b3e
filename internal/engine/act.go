package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/failpoint"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/runtime"
)

// runtimeCall is the executor's work for one action: the call, its outcome sorted by kind.
func (e *Engine) runtimeCall(a fsm.Action) func() Input {
	rt, stopTimeout, pulls := e.rt, e.cfg.StopTimeout, e.calls.pullCtx
	return func() Input {
		failpoint.Hit("engine-after-apply-before-runtime-call")
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout+2*time.Minute)
		if a.Kind == fsm.ActPull {
			// A pull is bounded by its progress (the runtime's inactivity timeout), not by a
			// deadline that would kill a large image's steady pull; the agent's own stop
			// ends it (shutdown waits for calls in flight, and must not wait for a pull).
			cancel()
			ctx, cancel = context.WithCancel(pulls)
		}
		defer cancel()
		return ActionResult{Action: a, Result: call(ctx, rt, a, stopTimeout)}
	}
}

// call makes the runtime call for an action and sorts its outcome: the runtime's errors are
// the edge's knowledge; what they mean for the container is the core's.
func call(ctx context.Context, rt runtime.Runtime, a fsm.Action, stopTimeout time.Duration) fsm.Result {
	id := a.RuntimeID
	var err error
	var res fsm.Result
	switch a.Kind {
	case fsm.ActPull:
		var out runtime.PullOutcome
		out, err = rt.PullImage(ctx, a.Spec.Image, a.Spec.PullPolicy)
		res.ImageID, res.ImageDigest, res.ImagePulled, res.ImageRefExisted, res.Note = out.ImageID, out.Digest, out.Pulled, out.RefExisted, out.Note
	case fsm.ActRemoveImage:
		err = rt.RemoveImage(ctx, a.RuntimeID, a.Refs)
	case fsm.ActCreate:
		res.RuntimeID, err = rt.Create(ctx, runtime.CreateSpec{Task: a.Task, Container: a.Spec, ImageID: a.ImageID})
		failpoint.Hit("runtime-after-create-before-journal")
	case fsm.ActStart:
		err = rt.Start(ctx, id)
		if (err == nil && len(a.Spec.Ports) > 0) || plainFailure(err) {
			// The ports bound for it go with its RUNNING, so only a container with ports is
			// asked after a start that answered: an exit before the answer comes from the exit
			// stream too, held until this RUNNING is journaled (fsm.Node's held exits), OOM kills
			// with it (docker/exits.go) — one engine call a task less. A start that answered an
			// error may yet have run the container (it ended before the answer): the runtime's
			// start time says so.
			if st, ierr := rt.Inspect(ctx, id); ierr == nil {
				res.Saw(observed(st))
				res.Ran, res.StartedAt = err != nil && !st.StartedAt.IsZero(), st.StartedAt
			}
		}
	case fsm.ActStop:
		if err = rt.Stop(ctx, id, stopTimeout); err == nil || errors.Is(err, runtime.ErrNotFound) {
			var st runtime.State
			if st, err = rt.Inspect(ctx, id); err == nil {
				res.Saw(observed(st))
			}
		}
	case fsm.ActInspect:
		var st runtime.State
		if id == "" {
			st, err = rt.Find(ctx, a.Task, a.Container)
		} else {
			st, err = rt.Inspect(ctx, id)
		}
		res.Saw(observed(st))
	case fsm.ActFence:
		if err = rt.RemoveUnlessStarted(ctx, id); errors.Is(err, runtime.ErrRunning) {
			// A start asked earlier landed: what it runs as, or ran to, is the fence's outcome.
			var st runtime.State
			if st, err = rt.Inspect(ctx, id); err == nil {
				res.Saw(observed(st))
				if !st.Running && !st.Exited {
					err = fmt.Errorf("fence %s: refused as started, yet it shows neither running nor exited", id) // asked again
				}
			}
		}
	case fsm.ActRemove:
		if id == "" {
			// Never journaled an id (a crash after create, or a stop before it): find it by name.
			var st runtime.State
			if st, err = rt.Find(ctx, a.Task, a.Container); err == nil {
				id = st.ID
			} else if errors.Is(err, runtime.ErrNotFound) {
				err = nil
			}
		}
		if id != "" && err == nil {
			err = rt.Remove(ctx, id)
		}
	}
	switch {
	case err == nil:
		res.Kind = fsm.Succeeded
	case errors.Is(err, runtime.ErrUnavailable):
		res.Kind, res.Err = fsm.Unavailable, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		res.Kind, res.Err = fsm.Unknown, err.Error() // it may still take effect
	case errors.Is(err, runtime.ErrAlreadyStarted):
		// The runtime refused a second start: the container ran once, and what became of
		// it is asked for (inspect), never taken for a start that failed.
		res.Kind, res.Err = fsm.Unknown, err.Error()
	case errors.Is(err, runtime.ErrNotFound):
		res.Kind, res.Err = fsm.Vanished, err.Error()
	case errors.Is(err, runtime.ErrImageInUse):
		res.Kind, res.Err = fsm.Refused, err.Error() // the image stays another's: the claim ends
	default:
		res.Kind, res.Err = fsm.Failed, err.Error()
	}
	return res
}

// plainFailure reports whether a call's error is one call sorts as Failed: the runtime
// answered, and said no.
func plainFailure(err error) bool {
	for _, known := range []error{runtime.ErrUnavailable, context.DeadlineExceeded, runtime.ErrAlreadyStarted, runtime.ErrNotFound} {
		if errors.Is(err, known) {
			return false
		}
	}
	return err != nil
}

// handleAction hands a runtime call's outcome to the node (which records what it did), keeps
// the runtime's health slot, and chooses the backoff when the node asks for a retry.
func (e *Engine) handleAction(now time.Time, in ActionResult) {
	a, r := in.Action, in.Result
	key := a.Key()
	e.linger.taken(a.Kind)
	if a.Kind != fsm.ActRemoveImage {
		switch r.Kind {
		case fsm.Unavailable:
			e.setHealth(HealthRuntime, r.Err)
		default:
			e.clearHealth(HealthRuntime)
		}
	}
	before := e.node.Ready()
	_ = e.node.Step(now, fsm.ActionFinished{Action: a, Result: r})
	after := e.node.Ready()
	switch {
	case len(after.Retries) > len(before.Retries):
		rt := e.calls.failed(now, key, e.rng)
		e.log.Warn().Str("error", r.Err).Str("action", key.String()).Int("tries", rt.tries).Dur("retry_in", rt.at.Sub(now)).Msg("runtime call failed; will retry")
		_ = e.node.Step(now, fsm.RetryAt{Key: key, At: rt.at})
	case a.Kind != fsm.ActRemoveImage:
		e.calls.succeeded(key)
	}
	if a.Kind == fsm.ActRemove && len(after.Records) > len(before.Records) {
		failpoint.Hit("cleanup-between-removals")
	}
}
