package fsm

import (
	"fmt"
	"time"
)

// imageMemory is the image collection cycle's state in the node. It guards that one disk
// question is out at a time, that cycles come every ImageInterval (sooner again when the core
// put one off), that what a cycle leaves for the next is remembered (cycles put off in a row,
// images sitting out after a refused removal), and that a pull the Gate held while image
// removals were out is decided again once they end.
type imageMemory struct {
	at        time.Time            // the next cycle (zero: not scheduled yet)
	asking    bool                 // a cycle's disk question is out
	deferred  int                  // cycles put off in a row because pulls were out
	pullsHeld map[string]bool      // tasks whose pull waits for image removals in flight
	refused   map[string]time.Time // images the runtime refused to remove, by id: when
}

func newImageMemory() imageMemory {
	return imageMemory{pullsHeld: map[string]bool{}, refused: map[string]time.Time{}}
}

// imageCycleRetry is how soon a cycle the core put off (a pull was out) is tried again.
const imageCycleRetry = 10 * time.Second

// imageCycleDue reports whether a collection cycle should ask for the disk space now.
func (n *Node) imageCycleDue(now time.Time) bool {
	m := &n.images
	if n.cfg.ImageInterval <= 0 || m.asking || n.recon.pending {
		return false
	}
	if m.at.IsZero() {
		m.at = now.Add(n.cfg.ImageFirst)
	}
	return !m.at.After(now) // asking is recorded at Advance
}

// imageSpace runs a cycle: the core plans it (planImageCycle: deferral while pulls are out,
// sit-outs, low disk) and its removals are dispatched.
func (n *Node) imageSpace(now time.Time, in ImageSpace) {
	m := &n.images
	m.asking = false
	m.at = now.Add(n.cfg.ImageInterval)
	p := n.st.planImageCycle(now, n.cfg.Images, ImageCycle{Free: in.Free, Total: in.Total, SpaceErr: in.Err != "", Deferred: m.deferred, Refused: m.refused}, n.calls.layer)
	m.deferred = p.Deferred
	if p.Defer {
		m.at = now.Add(min(n.cfg.ImageInterval, imageCycleRetry))
		return
	}
	for _, id := range p.Forget {
		delete(m.refused, id)
	}
	if in.Err != "" {
		n.note(Note{Kind: NoteDiskUnread, Detail: in.Err})
	} else if p.Low {
		n.note(Note{Kind: NoteDiskLow, Detail: fmt.Sprintf("free %d of %d bytes, under %d%%", in.Free, in.Total, n.cfg.Images.LowFreePercent)})
	}
	for _, a := range p.Removals {
		n.dispatch(now, a)
	}
}

// imageRemovalEnded records a removal's outcome and lets held pulls go.
func (n *Node) imageRemovalEnded(now time.Time, a Action, r Result) {
	v := n.st.Step(now, ActionFinished{Action: a, Result: r})
	switch {
	case len(v.Records) > 0 && r.Kind == Refused:
		// Not a failure: the image is another's too, and the agent let go of it for good.
		n.note(Note{Kind: NoteImageReleased, Subject: a.RuntimeID, Detail: r.Err})
	case len(v.Records) > 0:
		n.note(Note{Kind: NoteImageRemoved, Subject: a.RuntimeID})
	case r.Kind != Succeeded:
		if v.SitOut {
			n.images.refused[a.RuntimeID] = now
		}
		n.note(Note{Kind: NoteImageNotRemoved, Subject: a.RuntimeID, Detail: r.Err})
	}
	n.record(now, v.Records...)
	if !n.calls.layer.Out(ActRemoveImage) { // the pulls Gate held may go
		for arn := range n.images.pullsHeld {
			n.mark(arn)
		}
		clear(n.images.pullsHeld)
	}
}
