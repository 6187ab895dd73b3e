package fsm

import "time"

// callBook is the runtime calls the node released and has not seen answered, the calls the
// Ready being made decided (a layer over them), the failed calls waiting out a backoff, and
// the CLEANING tasks waiting for a removal slot. It guards: a decided call goes only through
// the Gate over what is out and what this Ready already decided, so no call is made twice at
// once and none overtakes the call it waits for; a removal beyond the slots queues and is
// handed a freed slot; a failed call goes again only once its backoff is over.
type callBook struct {
	out      InFlight                // released by an Advance, not yet answered
	layer    InFlight                // decided since the last Advance, over out (Over)
	backoff  map[ActionKey]time.Time // failed calls: until when they wait (zero: the caller has not said yet)
	removalQ RemovalQueue
}

func newCallBook(removalSlots int) callBook {
	return callBook{out: NewInFlight(removalSlots), backoff: map[ActionKey]time.Time{}}
}

// fresh starts the layer of a new Ready over what is out.
func (c *callBook) fresh() { c.layer = Over(&c.out) }

// released makes a committed Ready's calls out, but those the caller withheld: their tasks
// are decided again.
func (c *callBook) released(actions []Action, withheld []ActionKey, mark func(string)) {
	for _, a := range actions {
		if containsKey(withheld, a.Key()) {
			mark(a.Task)
			continue
		}
		c.out.Add(a.Key())
	}
	c.fresh()
}

// commitFailed drops the calls a Ready decided: none of them was made.
func (c *callBook) commitFailed() { c.fresh() }

func containsKey(keys []ActionKey, k ActionKey) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// backingOff reports whether a call waits out its backoff at now.
func (c *callBook) backingOff(now time.Time, key ActionKey) bool {
	until, ok := c.backoff[key]
	return ok && (until.IsZero() || until.After(now))
}

// retryAt sets when a call waiting for its backoff may go again.
func (c *callBook) retryAt(key ActionKey, at time.Time) {
	if _, ok := c.backoff[key]; ok {
		c.backoff[key] = at
	}
}

// takeDue marks the tasks of calls whose backoff is over: their calls may go again.
func (c *callBook) takeDue(now time.Time, mark func(string)) {
	for key, until := range c.backoff {
		if !until.IsZero() && !until.After(now) {
			mark(key.Task)
			delete(c.backoff, key)
		}
	}
}

// next is the earliest backoff to end (zero: none waits).
func (c *callBook) next() time.Time {
	var next time.Time
	for _, until := range c.backoff {
		if !until.IsZero() && (next.IsZero() || until.Before(next)) {
			next = until
		}
	}
	return next
}

// forget drops the backoffs of a cleaned task's calls: it no longer needs them.
func (c *callBook) forget(arn string) {
	for k := range c.backoff {
		if k.Task == arn {
			delete(c.backoff, k)
		}
	}
}

// Out reports whether a call of a kind is out or decided in the Ready being made.
func (n *Node) Out(kind ActionKind) bool { return n.calls.layer.Out(kind) }

// RemovalBacklog is how many tasks wait for a removal slot.
func (n *Node) RemovalBacklog() int { return n.calls.removalQ.Len() }

// dispatch puts a decided action into the Ready unless the runtime is not reconciled, its
// task is quarantined, it waits out a backoff, or the Gate says it waits (for a call out, or
// for a removal slot); its intent is recorded before it.
func (n *Node) dispatch(now time.Time, a Action) {
	key := a.Key()
	if n.recon.pending {
		return // the runtime is not reconciled yet: the task is decided again once it is
	}
	if a.Task != "" && n.quarantine.of(a.Task) != "" {
		return // no further actions for a quarantined task
	}
	if n.calls.backingOff(now, key) {
		return
	}
	switch w := n.calls.layer.gate(a); w.Reason {
	case Go:
	case WaitImageGone:
		n.images.pullsHeld[a.Task] = true // decided again when the image removals end
		return
	case WaitSlot:
		n.calls.removalQ.Wait(a.Task) // handed a slot when one frees (freeRemovalSlot)
		return
	default:
		return // the outcome it waits for makes the task dirty: decided again then
	}
	n.calls.layer.Add(key)
	n.record(now, a.Intent()...) // journaled with the Ready, before the call can be made
	if a.Task != "" && n.quarantine.of(a.Task) != "" {
		// Its intent was refused: never journaled, so the call must not go.
		n.calls.layer.End(key)
		return
	}
	n.rd.Actions = append(n.rd.Actions, a)
}

// actionFinished records what a runtime call did, asks for a retry when the core does, and
// hands a freed removal slot on.
func (n *Node) actionFinished(now time.Time, in ActionFinished) {
	a, r := in.Action, in.Result
	key := a.Key()
	n.calls.out.End(key)
	if a.Kind == ActRemoveImage {
		n.imageRemovalEnded(now, a, r)
		return
	}
	n.mark(a.Task) // decided again: an outcome that settles nothing may still free a next step
	if a.Kind == ActRemove {
		// The slot is handed on once this outcome is recorded: the hand-off must see this
		// container removed (or backing off), not as a removal still to make.
		defer n.freeRemovalSlot(now)
	}
	v := n.st.Step(now, in)
	if v.Retry {
		n.calls.backoff[key] = time.Time{}
		n.rd.Retries = append(n.rd.Retries, Retry{Key: key, Cause: r.Err})
		return
	}
	delete(n.calls.backoff, key)
	if r.Kind == Failed && len(v.Records) > 0 {
		n.note(Note{Kind: NoteFailedStopped, Subject: key.String(), Detail: r.Err})
	}
	n.record(now, v.Records...)
}

// freeRemovalSlot gives an ended removal's slot to the task the queue names (the longest
// waiting that can still use it).
func (n *Node) freeRemovalSlot(now time.Time) {
	if n.calls.removalQ.Len() == 0 {
		return
	}
	v := n.calls.layer
	v.Quarantined, v.Backoff = n.quarantine.tasks, map[ActionKey]bool{}
	for k := range n.calls.backoff {
		if n.calls.backingOff(now, k) {
			v.Backoff[k] = true
		}
	}
	if arn := n.calls.removalQ.next(n.st, now, n.cfg.Config, v); arn != "" {
		n.mark(arn)
	}
}
