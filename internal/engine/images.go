package engine

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/fsm"
)

// Image garbage collection at the edge. Every Interval the engine asks the runtime how full
// its disk is (an effect, like any other I/O), hands the answer to the core, which plans the
// cycle and chooses the images to remove (fsm/images.go: PlanImageCycle), and removes them as
// runtime actions; each removal is journaled by the core (image_removed). The engine keeps the
// cycle's times and what the core asks it to remember (cycles put off, images sitting out).

// ImageGC configures image garbage collection; a zero Interval turns it off.
type ImageGC struct {
	Interval        time.Duration // between cycles
	MinAge          time.Duration // unused this long before an image is removed
	PerCycle        int           // removals a cycle at most (default 5)
	LowFreePercent  int           // below this much free space on the runtime's disk, age does not count
	InitialInterval time.Duration // first cycle after start (default Interval)
}

// imageCycle is the collection cycle's own state. It guards that one disk question is out at a
// time, that cycles come every Interval (sooner again when the core put one off), that what
// the core asks to be remembered between cycles is (cycles put off in a row, images sitting
// out after a refused removal), and that a pull the Gate held while image removals were out
// is decided again once they end.
type imageCycle struct {
	at        time.Time            // the next cycle (zero: not scheduled yet)
	asking    bool                 // a cycle's disk question is out
	deferred  int                  // cycles put off in a row because pulls were out
	pullsHeld map[string]bool      // tasks whose pull waits for image removals in flight
	refused   map[string]time.Time // images the runtime refused to remove, by id: when
}

func newImageCycle() imageCycle {
	return imageCycle{pullsHeld: map[string]bool{}, refused: map[string]time.Time{}}
}

// ImageSpaceInput is the runtime's disk space, asked for by a collection cycle.
type ImageSpaceInput struct {
	Free, Total uint64
	Err         error
}

func (ImageSpaceInput) isInput() {}

// imageCycleDue reports whether a collection cycle should ask for the disk space now.
func (e *Engine) imageCycleDue(now time.Time) bool {
	if e.cfg.Images.Interval <= 0 || e.images.asking || e.recon.pending {
		return false
	}
	if e.images.at.IsZero() {
		e.images.at = now.Add(e.cfg.Images.InitialInterval)
	}
	if e.images.at.After(now) {
		return false
	}
	return true // asking is recorded once the burst's commit returns (begin)
}

// askImageSpace is the executor's work for a cycle's disk question.
func (e *Engine) askImageSpace() func() Input {
	rt := e.rt
	return func() Input {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		free, total, err := rt.ImageDiskFree(ctx)
		return ImageSpaceInput{Free: free, Total: total, Err: err}
	}
}

// handleImageSpace runs a cycle: the core plans it (fsm.State.PlanImageCycle: deferral while
// pulls are out, sit-outs, low disk), the engine dispatches the removals and keeps the times.
func (e *Engine) handleImageSpace(now time.Time, in ImageSpaceInput) {
	e.images.asking = false
	e.images.at = now.Add(e.cfg.Images.Interval)
	cfg := fsm.ImageConfig{MinAge: e.cfg.Images.MinAge, PerCycle: e.cfg.Images.PerCycle, LowFreePercent: e.cfg.Images.LowFreePercent}
	p := e.st.PlanImageCycle(now, cfg, fsm.ImageCycle{Free: in.Free, Total: in.Total, SpaceErr: in.Err != nil, Deferred: e.images.deferred, Refused: e.images.refused}, *e.inFlight())
	e.images.deferred = p.Deferred
	if p.Defer {
		e.images.at = now.Add(min(e.cfg.Images.Interval, imageCycleRetry))
		return
	}
	for _, id := range p.Forget {
		delete(e.images.refused, id)
	}
	if in.Err != nil {
		e.log.Warn().Err(in.Err).Msg("image collection: cannot read the runtime's free disk space; collecting by age only")
	} else if p.Low {
		e.log.Warn().Uint64("free_bytes", in.Free).Uint64("total_bytes", in.Total).Int("threshold_percent", e.cfg.Images.LowFreePercent).
			Msg("image collection: the runtime's disk is low; removing unused images regardless of age")
	}
	for _, a := range p.Removals {
		e.dispatch(now, a)
	}
}

// imageCycleRetry is how soon a cycle the core put off (a pull was out) is tried again.
const imageCycleRetry = 10 * time.Second

// imageRemovalEnded records a removal's outcome and lets held pulls go.
func (e *Engine) imageRemovalEnded(now time.Time, a fsm.Action, r fsm.Result) {
	v := e.st.Step(now, fsm.ActionFinished{Action: a, Result: r})
	if len(v.Records) > 0 && r.Kind == fsm.Refused {
		// Not a failure: the image is another's too (another name, a container, or someone's
		// pull, tag or load since the agent's pull), and the agent let go of it for good.
		e.metrics.imagesReleased.Inc()
		e.log.Info().Str("image", a.RuntimeID).Str("held_by", r.Err).Msg("image released: someone else holds it too (held_by says how); no longer the agent's to remove")
	} else if len(v.Records) > 0 {
		e.metrics.imagesRemoved.Inc()
		e.log.Info().Str("image", a.RuntimeID).Msg("image removed")
	} else if r.Kind != fsm.Succeeded {
		if v.SitOut {
			e.images.refused[a.RuntimeID] = now
		}
		e.metrics.imageRemovalFailures.Inc()
		e.log.Warn().Str("image", a.RuntimeID).Str("error", r.Err).Msg("image not removed; the next cycle may try again")
	}
	e.record(v.Records...)
	if !e.inFlight().Out(fsm.ActRemoveImage) { // the pulls Gate held may go
		for arn := range e.images.pullsHeld {
			e.sched.mark(arn)
		}
		clear(e.images.pullsHeld)
	}
}
