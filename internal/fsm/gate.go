package fsm

// Which decided call may go now. Decide says what should happen; whether it may happen yet
// depends on what the engine has out — calls made and not answered — which the engine hands
// in as data (InFlight). The rules here are pure: the same decisions and the same view always
// give the same answer, so the property test drives the rules the agent runs.

// InFlight is the engine's view of what it has out, handed to the core as data.
type InFlight struct {
	Calls map[ActionKey]bool // runtime calls made and not yet answered
}

// Out reports whether a call of a kind is out, on any container or image.
func (f InFlight) Out(kind ActionKind) bool {
	for k := range f.Calls {
		if k.Kind == kind {
			return true
		}
	}
	return false
}

// WaitReason says why a decided action does not go now.
type WaitReason int

const (
	Go            WaitReason = iota // it may go now
	WaitOut                         // the same call is out: its outcome makes the task decided again
	WaitCall                        // another call on the same container must answer first (waitsFor)
	WaitImageGone                   // a pull, while image removals are out
)

// Hold is the verdict on one decided action: whether it goes, and if not, for what.
type Hold struct {
	Reason WaitReason
	For    ActionKey // the call it waits for (WaitOut, WaitCall; WaitImageGone: the kind only)
}

// Gate says whether a decided action may go now, given what is out. It protects:
//   - a call is never made twice at once (WaitOut);
//   - an inspect never overtakes the start it settles, and a removal never overtakes a
//     create still out (waitsFor): either would record a truth the outstanding call may undo;
//   - no pull starts while an image removal is out: a pull may resolve any reference — a tag
//     the core never saw — to the image being removed, and find it present a moment before
//     it goes (images.go).
func (f InFlight) Gate(a Action) Hold {
	key := a.Key()
	if f.Calls[key] {
		return Hold{Reason: WaitOut, For: key}
	}
	if other, ok := waitsFor[a.Kind]; ok {
		k := ActionKey{Kind: other, Task: a.Task, Container: a.Container}
		if f.Calls[k] {
			return Hold{Reason: WaitCall, For: k}
		}
	}
	if a.Kind == ActPull && f.Out(ActRemoveImage) {
		return Hold{Reason: WaitImageGone, For: ActionKey{Kind: ActRemoveImage}}
	}
	return Hold{}
}
