//go:build !waitsbug

package fsm

// waitsFor names, for an action, a call on the same container that must have answered before
// it goes: an inspect settles a start whose own outcome may still come; and a create still out
// (a retry of one that timed out) may yet make the container, which a removal made before it
// answers would miss — the container would outlive its task's cleanup. A variable only so a
// -tags waitsbug build can plant the bug (waits_waitsbug.go); nothing changes it.
var waitsFor = map[ActionKind]ActionKind{
	ActInspect: ActStart,
	ActRemove:  ActCreate,
}
