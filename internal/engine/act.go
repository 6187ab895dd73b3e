package engine

import (
	"context"
	"errors"
	"time"

	"github.com/agentd/agentd/internal/failpoint"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/runtime"
)

// dispatch puts a runtime action into the burst's Ready unless the runtime is not reconciled,
// its task is quarantined, it waits out a backoff, or the core's Gate says it waits (for a
// call out, or for a removal slot: fsm/gate.go).
func (e *Engine) dispatch(now time.Time, a fsm.Action) {
	key := a.Key()
	if e.recon.pending {
		return // the runtime is not reconciled yet: the task is decided again once it is
	}
	if a.Task != "" && e.quarantine.of(a.Task) != "" {
		return // no further actions for a quarantined task (quarantine.go)
	}
	if e.calls.backingOff(now, key) {
		return
	}
	switch w := e.burst.out.Gate(a); w.Reason {
	case fsm.Go:
	case fsm.WaitImageGone:
		e.images.pullsHeld[a.Task] = true // decided again when the image removals end
		return
	case fsm.WaitSlot:
		e.calls.removalQ.Wait(a.Task) // handed a slot when one frees (freeRemovalSlot)
		return
	default:
		return // the outcome it waits for makes the task dirty: decided again then
	}
	e.burst.out.Add(key)    // out once the burst's commit returns (begin); until then, in its layer
	e.record(a.Intent()...) // journaled with the burst, before the call can be made
	if a.Task != "" && e.quarantine.of(a.Task) != "" {
		// Its intent was refused (quarantine.go): never journaled, so the call must not go.
		e.burst.out.End(key)
		return
	}
	e.burst.ready.Actions = append(e.burst.ready.Actions, a)
}

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
			// stream too, held until this RUNNING is journaled (fsm HeldExitAfter), OOM kills
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

// handleAction records what a runtime call did (the core decides what), keeps the runtime's
// health slot, and schedules a retry when the core asks for one.
func (e *Engine) handleAction(now time.Time, in ActionResult) {
	a, r := in.Action, in.Result
	key := a.Key()
	e.calls.out.End(key)
	e.linger.taken(a.Kind)
	if a.Kind == fsm.ActRemoveImage {
		e.imageRemovalEnded(now, a, r)
		return
	}
	e.sched.mark(a.Task) // decided again: an outcome that settles nothing may still free a next step
	if a.Kind == fsm.ActRemove {
		// The slot is handed on once this outcome is recorded: the hand-off must see this
		// container removed (or backing off), not as a removal still to make.
		defer e.freeRemovalSlot(now)
	}
	switch r.Kind {
	case fsm.Unavailable:
		e.setHealth(HealthRuntime, r.Err)
	default:
		e.clearHealth(HealthRuntime)
	}
	v := e.st.Step(now, fsm.ActionFinished{Action: a, Result: r})
	if v.Retry {
		e.backoffAction(now, key, r.Err)
		return
	}
	e.calls.succeeded(key)
	if r.Kind == fsm.Failed && len(v.Records) > 0 {
		e.log.Warn().Str("action", key.String()).Str("error", r.Err).Msg("runtime call failed; the container is recorded STOPPED")
	}
	e.record(v.Records...)
	if a.Kind == fsm.ActRemove && len(v.Records) > 0 {
		failpoint.Hit("cleanup-between-removals")
	}
}

// freeRemovalSlot gives an ended removal's slot to the task the core's queue names
// (fsm.RemovalQueue.Next: the longest waiting that can still use it).
func (e *Engine) freeRemovalSlot(now time.Time) {
	if e.calls.removalQ.Len() == 0 {
		return
	}
	if arn := e.calls.removalQ.Next(e.st, now, e.fcfg(), e.calls.view(now, *e.inFlight(), e.quarantine.tasks)); arn != "" {
		e.sched.mark(arn)
	}
}

// backoffAction schedules a failed call again, later each time it fails.
func (e *Engine) backoffAction(now time.Time, key fsm.ActionKey, cause string) {
	r := e.calls.failed(now, key, e.rng)
	e.log.Warn().Str("error", cause).Str("action", key.String()).Int("tries", r.tries).Dur("retry_in", r.at.Sub(now)).Msg("runtime call failed; will retry")
}
