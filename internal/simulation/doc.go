// Package simulation runs the real engine, projection, journal, submitter, simulated runtime
// and reference control plane in one goroutine on a virtual clock, with every choice — what
// the control plane sends, throttles, fails or loses, when the agent crashes, how long each
// call takes — drawn from one seed. The same seed replays the same run exactly.
//
// It promises to check, after every step, that no task was cleaned before the control plane
// accepted its STOPPED and that no container was created twice; and at the end, once faults
// stop, that every task is cleaned, every change settled, and the control plane's record
// agrees with the journal.
//
// One concept a file: run.go (a run: options, result, the loop), schedule.go (what each step
// does, faults included), clock.go (virtual time and the calls in flight), host.go (the
// agent's start, crash and restart, and its runtime's streams), controlplane.go (the control
// plane's side), tasks.go (the tasks it assigns), images.go (the registries and the host's
// images), check.go (the invariants), trace.go (the trace, its hash, the focus on a failure).
package simulation
