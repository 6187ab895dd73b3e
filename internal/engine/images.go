package engine

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/fsm"
)

// Image garbage collection at the edge. Every Interval the engine asks the runtime how full
// its disk is (an effect, like any other I/O), hands the answer to the core, which chooses
// the images to remove (fsm/images.go), and removes them as runtime actions; each removal is
// journaled by the core (image_removed). Pulls and removals never overlap: a pull may resolve
// any reference — a tag the core never saw — to the image being removed, and find it present a
// moment before it goes. So a cycle that finds a pull out tries again shortly, and while
// removals are out no pull starts (they are few and quick).

// ImageGC configures image garbage collection; a zero Interval turns it off.
type ImageGC struct {
	Interval        time.Duration // between cycles
	MinAge          time.Duration // unused this long before an image is removed
	PerCycle        int           // removals a cycle at most (default 5)
	LowFreePercent  int           // below this much free space on the runtime's disk, age does not count
	InitialInterval time.Duration // first cycle after start (default Interval)
}

// ImageSpaceInput is the runtime's disk space, asked for by a collection cycle.
type ImageSpaceInput struct {
	Free, Total uint64
	Err         error
}

func (ImageSpaceInput) isInput() {}

// imageCollector is the runtime's image removal, when it has one.
func (e *Engine) imageCollector() docker.ImageCollector {
	ic, _ := e.rt.(docker.ImageCollector)
	return ic
}

// imageCycleDue reports whether a collection cycle should ask for the disk space now, and
// marks it asked.
func (e *Engine) imageCycleDue(now time.Time) bool {
	if e.cfg.Images.Interval <= 0 || e.imageCollector() == nil || e.imagesAsking || e.reconcilePending {
		return false
	}
	if e.imagesAt.IsZero() {
		e.imagesAt = now.Add(e.cfg.Images.InitialInterval)
	}
	if e.imagesAt.After(now) {
		return false
	}
	e.imagesAsking = true
	e.onDrop(func() { e.imagesAsking = false })
	return true
}

// askImageSpace is the executor's work for a cycle's disk question.
func (e *Engine) askImageSpace() func() Input {
	ic := e.imageCollector()
	return func() Input {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		free, total, err := ic.ImageDiskFree(ctx)
		return ImageSpaceInput{Free: free, Total: total, Err: err}
	}
}

// handleImageSpace runs a cycle: the core chooses, the engine dispatches the removals.
func (e *Engine) handleImageSpace(now time.Time, in ImageSpaceInput) {
	e.imagesAsking = false
	e.imagesAt = now.Add(e.cfg.Images.Interval)
	low := in.Err == nil && in.Total > 0 && in.Free*100 < in.Total*uint64(e.cfg.Images.LowFreePercent)
	if e.pullsOut() {
		// A pull may resolve to an image this cycle would remove: wait for a moment without
		// pulls — but not for ever while the disk fills: low on space, after imageDeferLimit
		// tries the cycle goes on, and only an image a live task names by no reference of its
		// own (another tag of the same image) could still be caught in between.
		e.imagesDeferred++
		if !low || e.imagesDeferred <= imageDeferLimit {
			e.imagesAt = now.Add(min(e.cfg.Images.Interval, imageCycleRetry))
			return
		}
	}
	e.imagesDeferred = 0
	if in.Err != nil {
		e.log.Warn().Err(in.Err).Msg("image collection: cannot read the runtime's free disk space; collecting by age only")
	} else if low {
		e.log.Warn().Uint64("free_bytes", in.Free).Uint64("total_bytes", in.Total).Int("threshold_percent", e.cfg.Images.LowFreePercent).
			Msg("image collection: the runtime's disk is low; removing unused images regardless of age")
	}
	skip := map[string]bool{}
	for id, at := range e.imagesRefused {
		if now.Sub(at) >= imageRefusedWait || e.st.Images[id] == nil {
			delete(e.imagesRefused, id)
			continue
		}
		skip[id] = true
	}
	acts := e.st.CollectImages(now, fsm.ImageConfig{MinAge: e.cfg.Images.MinAge, PerCycle: e.cfg.Images.PerCycle, Skip: skip}, low)
	for _, a := range acts {
		e.dispatch(now, a)
	}
}

// imageRefusedWait is how long an image whose removal failed sits out the cycles, so the next
// oldest are collected instead of the same failure asked for again. (An image another name or
// container holds is not retried at all: its claim ends, image_released.)
const imageRefusedWait = time.Hour

// imageCycleRetry is how soon a cycle that found a pull out tries again; imageDeferLimit how
// many times it does so, with the disk low, before it goes on anyway.
const (
	imageCycleRetry = 10 * time.Second
	imageDeferLimit = 6
)

// pullsOut reports whether a pull is in flight.
func (e *Engine) pullsOut() bool { return e.out.Out(fsm.ActPull) }

// removingImages reports whether an image removal is in flight: pulls wait (fsm.InFlight.Gate).
func (e *Engine) removingImages() bool { return e.out.Out(fsm.ActRemoveImage) }

// imageRemovalEnded records a removal's outcome and lets held pulls go.
func (e *Engine) imageRemovalEnded(now time.Time, a fsm.Action, r fsm.Result) {
	v := e.st.Step(now, fsm.ActionFinished{Action: a, Result: r})
	if len(v.Records) > 0 && r.Kind == fsm.Refused {
		// Not a failure: the image is another's too, and the agent let go of it for good.
		e.metrics.imagesReleased.Inc()
		e.log.Info().Str("image", a.RuntimeID).Str("held_by", r.Err).Msg("image released: the runtime keeps it for another name or container; no longer the agent's to remove")
	} else if len(v.Records) > 0 {
		e.metrics.imagesRemoved.Inc()
		e.log.Info().Str("image", a.RuntimeID).Msg("image removed")
	} else if r.Kind != fsm.Succeeded {
		if r.Kind == fsm.Failed {
			e.imagesRefused[a.RuntimeID] = now
		}
		e.metrics.imageRemovalFailures.Inc()
		e.log.Warn().Str("image", a.RuntimeID).Str("error", r.Err).Msg("image not removed; the next cycle may try again")
	}
	e.record(v.Records...)
	if !e.removingImages() {
		for arn := range e.pullsHeld {
			e.dirty[arn] = true
		}
		clear(e.pullsHeld)
	}
}
