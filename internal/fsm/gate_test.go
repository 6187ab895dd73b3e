package fsm_test

import (
	"testing"

	"github.com/agentd/agentd/internal/fsm"
)

// Which decided call may go now, given what the engine has out: each row is a rule the
// engine runs (fsm.InFlight.Gate), and what breaking it would let through.
func TestGate(t *testing.T) {
	act := func(kind fsm.ActionKind, task, ctr string) fsm.Action {
		return fsm.Action{Kind: kind, Task: task, Container: ctr}
	}
	key := func(kind fsm.ActionKind, task, ctr string) fsm.ActionKey { return act(kind, task, ctr).Key() }
	for _, tc := range []struct {
		name  string
		out   []fsm.ActionKey
		layer []fsm.ActionKey // decided earlier in the same burst, not made yet (fsm.Over)
		slots int
		a     fsm.Action
		want  fsm.WaitReason
		waits fsm.ActionKey
	}{
		{name: "nothing out: it goes", a: act(fsm.ActStart, "t", "c"), want: fsm.Go},
		{name: "the same call out: never twice at once", out: []fsm.ActionKey{key(fsm.ActStop, "t", "c")},
			a: act(fsm.ActStop, "t", "c"), want: fsm.WaitOut, waits: key(fsm.ActStop, "t", "c")},
		{name: "an inspect waits for the start it settles", out: []fsm.ActionKey{key(fsm.ActStart, "t", "c")},
			a: act(fsm.ActInspect, "t", "c"), want: fsm.WaitCall, waits: key(fsm.ActStart, "t", "c")},
		{name: "an inspect of another container goes", out: []fsm.ActionKey{key(fsm.ActStart, "t", "d")},
			a: act(fsm.ActInspect, "t", "c"), want: fsm.Go},
		{name: "a removal waits for a create still out", out: []fsm.ActionKey{key(fsm.ActCreate, "t", "c")},
			a: act(fsm.ActRemove, "t", "c"), want: fsm.WaitCall, waits: key(fsm.ActCreate, "t", "c")},
		{name: "a removal of another task's container goes", out: []fsm.ActionKey{key(fsm.ActCreate, "u", "c")},
			a: act(fsm.ActRemove, "t", "c"), want: fsm.Go},
		{name: "a start does not wait for an inspect", out: []fsm.ActionKey{key(fsm.ActInspect, "t", "c")},
			a: act(fsm.ActStart, "t", "c"), want: fsm.Go},
		{name: "a pull waits while an image removal is out", out: []fsm.ActionKey{key(fsm.ActRemoveImage, "", "sha256:x")},
			a: act(fsm.ActPull, "t", "c"), want: fsm.WaitImageGone, waits: fsm.ActionKey{Kind: fsm.ActRemoveImage}},
		{name: "a create does not wait for image removals", out: []fsm.ActionKey{key(fsm.ActRemoveImage, "", "sha256:x")},
			a: act(fsm.ActCreate, "t", "c"), want: fsm.Go},
		{name: "a removal with a slot free goes", slots: 2, out: []fsm.ActionKey{key(fsm.ActRemove, "u", "c")},
			a: act(fsm.ActRemove, "t", "c"), want: fsm.Go},
		{name: "a removal with every slot taken queues", slots: 1, out: []fsm.ActionKey{key(fsm.ActRemove, "u", "c")},
			a: act(fsm.ActRemove, "t", "c"), want: fsm.WaitSlot},
		{name: "no bound: removals go", out: []fsm.ActionKey{key(fsm.ActRemove, "u", "c"), key(fsm.ActRemove, "v", "c")},
			a: act(fsm.ActRemove, "t", "c"), want: fsm.Go},
		{name: "a call decided earlier in the burst: never twice", layer: []fsm.ActionKey{key(fsm.ActStop, "t", "c")},
			a: act(fsm.ActStop, "t", "c"), want: fsm.WaitOut, waits: key(fsm.ActStop, "t", "c")},
		{name: "an inspect waits for a start decided in the same burst", layer: []fsm.ActionKey{key(fsm.ActStart, "t", "c")},
			a: act(fsm.ActInspect, "t", "c"), want: fsm.WaitCall, waits: key(fsm.ActStart, "t", "c")},
		{name: "a pull waits for an image removal decided in the same burst", layer: []fsm.ActionKey{key(fsm.ActRemoveImage, "", "sha256:x")},
			a: act(fsm.ActPull, "t", "c"), want: fsm.WaitImageGone, waits: fsm.ActionKey{Kind: fsm.ActRemoveImage}},
		{name: "slots count the burst's removals beside those out", slots: 2, out: []fsm.ActionKey{key(fsm.ActRemove, "u", "c")},
			layer: []fsm.ActionKey{key(fsm.ActRemove, "v", "c")}, a: act(fsm.ActRemove, "t", "c"), want: fsm.WaitSlot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fsm.NewInFlight(tc.slots)
			for _, k := range tc.out {
				f.Add(k)
			}
			burst := fsm.Over(&f)
			for _, k := range tc.layer {
				burst.Add(k)
			}
			if got := burst.Gate(tc.a); got.Reason != tc.want || got.For != tc.waits {
				t.Fatalf("Gate(%s) with %v out = %+v; want reason %d waiting for %v", tc.a.Key(), tc.out, got, tc.want, tc.waits)
			}
		})
	}
}
