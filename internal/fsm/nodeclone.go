package fsm

import (
	"maps"
	"slices"
)

// Clone is a deep copy of the node: stepping either never changes the other. The explorer
// (internal/explore) branches the node at every state it expands. Every field is copied here;
// TestNodeCloneCopiesEveryField fails when the Node gains one this does not know.
func (n *Node) Clone() *Node {
	c := *n
	c.st = n.st.Clone()
	c.rd = Ready{Records: slices.Clone(n.rd.Records), Acks: slices.Clone(n.rd.Acks), Actions: slices.Clone(n.rd.Actions),
		Wakes: slices.Clone(n.rd.Wakes), Retries: slices.Clone(n.rd.Retries), Reconcile: slices.Clone(n.rd.Reconcile),
		ImageSpace: n.rd.ImageSpace, Compact: n.rd.Compact, Dropped: slices.Clone(n.rd.Dropped), Notes: slices.Clone(n.rd.Notes)}
	c.calls = callBook{out: n.calls.out.clone(nil), backoff: maps.Clone(n.calls.backoff),
		removalQ: RemovalQueue{order: slices.Clone(n.calls.removalQ.order), queued: maps.Clone(n.calls.removalQ.queued)}}
	c.calls.layer = n.calls.layer.clone(&c.calls.out)
	c.dirty, c.wakes = maps.Clone(n.dirty), maps.Clone(n.wakes)
	c.exits = exitBook{held: maps.Clone(n.exits.held), released: slices.Clone(n.exits.released),
		inReady: slices.Clone(n.exits.inReady), refused: slices.Clone(n.exits.refused)}
	c.quarantine.tasks = maps.Clone(n.quarantine.tasks)
	c.images.pullsHeld, c.images.refused = maps.Clone(n.images.pullsHeld), maps.Clone(n.images.refused)
	return &c
}

// clone copies a view of calls out; a layer's base becomes under.
func (f InFlight) clone(under *InFlight) InFlight {
	f.calls, f.n = maps.Clone(f.calls), maps.Clone(f.n)
	f.Backoff, f.Quarantined = maps.Clone(f.Backoff), maps.Clone(f.Quarantined)
	if f.under != nil {
		f.under = under
	}
	return f
}
