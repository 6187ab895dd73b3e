//go:build waitsbug

package fsm

// waitsFor emptied: the bug planted (an inspect made while the start it settles is out, a
// removal while a create is), for the property test and the simulation to find
// (make test-sim). Never built without -tags waitsbug.
var waitsFor = map[ActionKind]ActionKind{}
