// Package bindroot is the host's bind boundary: the directories (--allow-bind-root) beneath
// which tasks may bind-mount, each opened once at start and checked closed to local users by
// every path and mount that shows it (roots.go, mounttable.go); a bind source resolved beneath
// its root's descriptor without following a link or crossing a mount, handed on opened, never
// as a path; and the namespaces that make an opened descriptor mean the same directory to the
// container engine (mountns.go). A runtime that mounts (internal/docker) asks it for every
// source; one that mounts nothing (internal/simruntime) for the same verdicts.
package bindroot

import "errors"

// VolumePrefix starts the name of every volume a runtime makes for a bind mount: the engine's
// mounts of them are its own (mounttable.go), and a task may not name one
// (protocol.ReservedVolumePrefix is the same string).
const VolumePrefix = "agentd-bind-"

// ErrUnreachable is an engine socket that does not answer (CheckSocketPeer): not a refusal,
// the check is made again when it answers.
var ErrUnreachable = errors.New("the engine does not answer")
