package fsm

import (
	"time"

	"github.com/agentd/agentd/internal/event"
)

// reconGate is reconciling the runtime after it did not answer what it holds. It guards that
// no runtime call is made before the runtime has been reconciled (pending: dispatch, the
// image cycle and the hand-out of slots wait) and that one question is out at a time
// (asking); the caller keeps the wait before asking again (Tick.AskRuntime).
type reconGate struct {
	pending bool // the runtime is not reconciled yet
	asking  bool // a reconcile's question is out
}

func (r *reconGate) due() bool { return r.pending && !r.asking }

func (r *reconGate) unanswered() { r.pending, r.asking = true, false }

// observed records what the runtime holds, as the core reads it; every task is decided again,
// since decisions were held back while unreconciled.
func (n *Node) observed(now time.Time, in RuntimeObserved) {
	n.recon = reconGate{}
	v := n.st.Step(now, in)
	for _, o := range v.Strangers {
		n.note(Note{Kind: NoteStranger, Subject: o.Task + "/" + o.Container, Detail: o.ID})
	}
	n.record(now, v.Records...)
	n.markAll()
}

// probes are the containers reconcile asks about beyond the runtime's list: those created and
// never journaled (by name), and those known by id that may be gone.
func (n *Node) probes() []Probe {
	out := []Probe{}
	for _, t := range n.st.SortedTasks() {
		if t.Known.Rank() >= event.StatusStopped.Rank() {
			continue
		}
		for _, c := range t.Containers {
			switch {
			case (c.Known == event.StatusPulled || c.Known == event.StatusCreated) && c.RuntimeID == "":
				// created but never journaled; CREATED without an id: made again after a rollback
				out = append(out, Probe{Task: t.ARN, Container: c.Name})
			case c.RuntimeID != "" && (c.Known == event.StatusCreated || c.Known == event.StatusRunning):
				out = append(out, Probe{Task: t.ARN, Container: c.Name, ID: c.RuntimeID})
			}
		}
	}
	return out
}

// Probes are the containers reconcile asks about now (the caller asks at a start, before any
// Ready).
func (n *Node) Probes() []Probe { return n.probes() }
