package engine

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/fsm"
)

// Image garbage collection at the edge. When the node's Ready asks (every Interval, sooner
// after a cycle put off), the engine asks the runtime how full its disk is (an effect, like
// any other I/O) and hands the answer to the node, which plans the cycle and chooses the
// images to remove (fsm/nodeimages.go), remembers what a cycle leaves for the next, and
// hands the removals out as runtime actions; each removal is journaled by the core
// (image_removed).

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

// imageSpaceInput is the node's input for a cycle's disk answer.
func imageSpaceInput(in ImageSpaceInput) fsm.ImageSpace {
	sp := fsm.ImageSpace{Free: in.Free, Total: in.Total}
	if in.Err != nil {
		sp.Err = in.Err.Error()
	}
	return sp
}
