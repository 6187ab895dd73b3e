package fsm

import (
	"time"

	"github.com/agentd/agentd/internal/event"
)

// exitBook is the exits from the runtime's stream that are not journaled yet. It guards that
// an exit is never lost: one that came before its start was journaled waits (held) until the
// core says it may be handed in again or dropped (heldExitAfter), and one whose Ready's commit
// failed is kept (refused) until a commit takes it, since nothing else re-derives it before a
// restart.
type exitBook struct {
	held     map[string]ContainerExited // exits seen before their start was journaled, by runtime id
	released []ContainerExited          // held exits whose start is now journaled, to hand in again
	inReady  []ContainerExited          // exits recorded in the Ready being made
	refused  []ContainerExited          // exits whose commit failed, kept until one takes them
}

func newExitBook() exitBook { return exitBook{held: map[string]ContainerExited{}} }

// after moves the held exits a record decides: handed in again or dropped.
func (h *exitBook) after(st *State, r event.Record) {
	for id, x := range h.held {
		switch st.heldExitAfter(r, x) {
		case HandIn:
			delete(h.held, id)
			h.released = append(h.released, x)
		case DropHeld:
			delete(h.held, id) // its start was never journaled and never will be
		}
	}
}

// next takes the first released exit.
func (h *exitBook) next() (ContainerExited, bool) {
	if len(h.released) == 0 {
		return ContainerExited{}, false
	}
	x := h.released[0]
	h.released = h.released[1:]
	return x, true
}

func (h *exitBook) hasReleased() bool { return len(h.released) > 0 }
func (h *exitBook) waiting() bool     { return len(h.refused) > 0 }

// committed: the Ready's exits are journaled. commitFailed: they are kept to go in again.
func (h *exitBook) committed() { h.inReady = nil }
func (h *exitBook) commitFailed() {
	h.refused = append(h.refused, h.inReady...)
	h.inReady = nil
}

// retryRefused hands in again the exits of commits that failed.
func (h *exitBook) retryRefused(exit func(ContainerExited)) {
	xs := h.refused
	h.refused = nil
	for _, x := range xs {
		exit(x)
	}
}

// exit records a container's exit from the runtime's stream, once; an exit that came before
// its start was journaled is held until it is.
func (n *Node) exit(now time.Time, x ContainerExited) {
	v := n.st.Step(now, x)
	if v.Hold {
		n.exits.held[x.RuntimeID] = x
		return
	}
	if len(v.Records) > 0 {
		n.record(now, v.Records...)
		n.exits.inReady = append(n.exits.inReady, x)
	}
}
