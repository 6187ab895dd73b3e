package fsm

import "time"

// Which decided call may go now. Decide says what should happen; whether it may happen yet
// depends on what is out — calls released and not answered — which the node keeps
// (nodecalls.go). The rules here are pure: the same decisions and the same view always give
// the same answer, so the property test, driving the node, drives the rules the agent runs.

// InFlight is what is out, as the Gate reads it. The node adds a call when an Advance says
// it went and ends it when its outcome comes (Add, End): the calls are reachable only through
// them, so the counts the rules read stay in step with the calls.
type InFlight struct {
	calls map[ActionKey]bool // runtime calls made and not yet answered
	// RemovalSlots is how many container removals may be out at once (0: no bound): cleaning
	// is I/O, and thousands of tasks stopping together queue instead of storming the runtime.
	RemovalSlots int
	// Backoff and Quarantined matter only to the removal queue (RemovalQueue.next): calls
	// waiting out a backoff now, and tasks the engine makes no calls for.
	Backoff     map[ActionKey]bool
	Quarantined map[string]string
	n           map[ActionKind]int
	// under is what is out beneath a layer of calls decided and not yet made (Over): the
	// rules read both.
	under *InFlight
}

// NewInFlight is an empty view with a bound on removals out at once (0: none).
func NewInFlight(removalSlots int) InFlight {
	return InFlight{calls: map[ActionKey]bool{}, RemovalSlots: removalSlots, n: map[ActionKind]int{}}
}

// Over is an empty layer over base, with base's slots: the rules read the calls of both, Add
// and End touch the layer only. The engine decides a burst's calls in a layer over what is
// out, so the second call of a burst waits for the first like any other, and adds them to
// what is out only once the burst's commit has returned.
func Over(base *InFlight) InFlight {
	return InFlight{RemovalSlots: base.RemovalSlots, under: base} // its maps come with its first Add
}

// Add records a call made.
func (f *InFlight) Add(k ActionKey) {
	if f.calls == nil {
		f.calls, f.n = map[ActionKey]bool{}, map[ActionKind]int{}
	}
	if !f.calls[k] {
		f.calls[k] = true
		f.n[k.Kind]++
	}
}

// End records a call answered.
func (f *InFlight) End(k ActionKey) {
	if f.calls[k] {
		delete(f.calls, k)
		f.n[k.Kind]--
	}
}

// Has reports whether a call is out.
func (f InFlight) Has(k ActionKey) bool { return f.calls[k] || f.under != nil && f.under.Has(k) }

// Out reports whether a call of a kind is out, on any container or image.
func (f InFlight) Out(kind ActionKind) bool { return f.count(kind) > 0 }

// count is how many calls of a kind are out.
func (f InFlight) count(kind ActionKind) int {
	n := f.n[kind]
	if f.under != nil {
		n += f.under.count(kind)
	}
	return n
}

// WaitReason says why a decided action does not go now.
type WaitReason int

const (
	Go            WaitReason = iota // it may go now
	WaitOut                         // the same call is out: its outcome makes the task decided again
	WaitCall                        // another call on the same container must answer first (waitsFor)
	WaitImageGone                   // a pull, while image removals are out
	WaitSlot                        // a removal, while every removal slot is taken: it queues (RemovalQueue)
)

// Hold is the verdict on one decided action: whether it goes, and if not, for what.
type Hold struct {
	Reason WaitReason
	For    ActionKey // the call it waits for (WaitOut, WaitCall; WaitImageGone: the kind only)
}

// gate says whether a decided action may go now, given what is out. It protects:
//   - a call is never made twice at once (WaitOut);
//   - an inspect never overtakes the start it settles, and a removal never overtakes a
//     create still out (waitsFor): either would record a truth the outstanding call may undo;
//   - no pull starts while an image removal is out: a pull may resolve any reference — a tag
//     the core never saw — to the image being removed, and find it present a moment before
//     it goes (images.go);
//   - no more container removals are out than RemovalSlots.
func (f InFlight) gate(a Action) Hold {
	key := a.Key()
	if f.Has(key) {
		return Hold{Reason: WaitOut, For: key}
	}
	if other, ok := waitsFor[a.Kind]; ok {
		k := ActionKey{Kind: other, Task: a.Task, Container: a.Container}
		if f.Has(k) {
			return Hold{Reason: WaitCall, For: k}
		}
	}
	if a.Kind == ActPull && f.Out(ActRemoveImage) {
		return Hold{Reason: WaitImageGone, For: ActionKey{Kind: ActRemoveImage}}
	}
	if a.Kind == ActRemove && f.RemovalSlots > 0 && f.count(ActRemove) >= f.RemovalSlots {
		return Hold{Reason: WaitSlot}
	}
	return Hold{}
}

// RemovalQueue is the CLEANING tasks waiting for a removal slot, in the order they asked.
type RemovalQueue struct {
	order  []string
	queued map[string]bool
}

// Wait queues a task for a slot, once.
func (q *RemovalQueue) Wait(arn string) {
	if q.queued == nil {
		q.queued = map[string]bool{}
	}
	if !q.queued[arn] {
		q.queued[arn] = true
		q.order = append(q.order, arn)
	}
}

// Len is how many tasks wait.
func (q *RemovalQueue) Len() int { return len(q.order) }

// next takes a freed slot's task off the queue: the one that has waited longest and can
// still use it ("": none). Entries go stale: a queued task also gets slots without being
// handed one (its own removal ends and it is decided again first), so when its entry comes
// up it may have nothing left to remove; handing it the slot would waste it, and once no
// removal is out nothing would wake the tasks behind it (simulation seed 11716).
func (q *RemovalQueue) next(s *State, now time.Time, cfg Config, f InFlight) string {
	for len(q.order) > 0 {
		arn := q.order[0]
		q.order = q.order[1:]
		delete(q.queued, arn)
		if s.wantsRemoval(arn, now, cfg, f) {
			return arn
		}
	}
	return ""
}

// wantsRemoval reports whether a task has a removal to make now: live, not quarantined, and
// decided a removal that is neither out nor waiting out a backoff (those make the task
// decided again when they end).
func (s *State) wantsRemoval(arn string, now time.Time, cfg Config, f InFlight) bool {
	if _, live := s.Tasks[arn]; !live || f.Quarantined[arn] != "" {
		return false
	}
	for _, a := range s.decide(now, cfg, arn).Actions {
		if a.Kind == ActRemove && !f.Has(a.Key()) && !f.Backoff[a.Key()] {
			return true
		}
	}
	return false
}
