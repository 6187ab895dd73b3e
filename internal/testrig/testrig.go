// Package testrig is the one rig the engine's, the daemon's and the simulation's tests drive an
// agent with: a virtual clock (Clock), an executor that holds the engine's work until the test
// runs it (Executor), and a control plane whose answers the test scripts (ControlPlane). Each
// is deterministic — nothing moves but what the test moves, in the order it was asked for — so a
// seeded test replays. It is shared by tests only and linked by no production binary
// (`go list -deps ./cmd/agentd` does not name it); it imports neither the engine nor the
// runtimes, so the engine's own tests can use it too.
package testrig
