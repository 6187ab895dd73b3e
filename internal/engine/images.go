package engine

import (
	"context"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// Image garbage collection at the edge. Every Interval the engine asks the runtime how full
// its disk is (an effect, like any other I/O), hands the answer to the core, which chooses
// the images to remove (fsm/images.go), and removes them as runtime actions; each removal is
// journaled by the core (image_removed). While an image's removal is out, no pull of a
// reference it was pulled by starts: the pull could find it present a moment before it goes.

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
	low := false
	if in.Err != nil {
		e.log.Warn().Err(in.Err).Msg("image collection: cannot read the runtime's free disk space; collecting by age only")
	} else if in.Total > 0 && in.Free*100 < in.Total*uint64(e.cfg.Images.LowFreePercent) {
		low = true
		e.log.Warn().Uint64("free_bytes", in.Free).Uint64("total_bytes", in.Total).Int("threshold_percent", e.cfg.Images.LowFreePercent).
			Msg("image collection: the runtime's disk is low; removing unused images regardless of age")
	}
	acts := e.st.CollectImages(now, fsm.ImageConfig{MinAge: e.cfg.Images.MinAge, PerCycle: e.cfg.Images.PerCycle}, low)
	for _, a := range acts {
		e.dispatch(now, a)
	}
}

// removingImage notes an image removal going out, and forgets it when it ends or is dropped.
func (e *Engine) removingImage(a fsm.Action) {
	img := e.st.Images[a.RuntimeID]
	if img == nil {
		return
	}
	e.imageRemovals[a.RuntimeID] = img
	e.onDrop(func() { delete(e.imageRemovals, a.RuntimeID) })
}

// pullHeld reports whether a pull must wait for an image removal in flight: the removal's
// image was pulled by the same reference, or the reference names its digest.
func (e *Engine) pullHeld(a fsm.Action) bool {
	for _, img := range e.imageRemovals {
		for _, r := range img.Refs {
			if r == a.Spec.Image {
				return true
			}
		}
		if img.Digest != "" && strings.HasSuffix(a.Spec.Image, "@"+img.Digest) {
			return true
		}
	}
	return false
}

// imageRemovalEnded records a removal's outcome and lets held pulls go.
func (e *Engine) imageRemovalEnded(now time.Time, a fsm.Action, r fsm.Result) {
	delete(e.imageRemovals, a.RuntimeID)
	v := e.st.Step(now, fsm.ActionFinished{Action: a, Result: r})
	if len(v.Records) > 0 {
		e.metrics.imagesRemoved.Inc()
		e.log.Info().Str("image", a.RuntimeID).Msg("image removed")
	} else if r.Kind != fsm.Succeeded {
		e.metrics.imageRemovalFailures.Inc()
		e.log.Warn().Str("image", a.RuntimeID).Str("error", r.Err).Msg("image not removed; the next cycle may try again")
	}
	e.record(v.Records...)
	for arn, t := range e.st.Tasks {
		for _, c := range t.Containers {
			if c.Known == event.StatusNone {
				e.dirty[arn] = true
			}
		}
	}
}
