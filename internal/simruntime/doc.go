// Package simruntime is agentd's simulated container runtime: a deterministic stand-in for the
// Docker Engine keeping the same contract (runtime.Runtime), for dev mode (`agentd dev`,
// `agentd run --runtime sim`), benchmarks of the agent without an engine, and the
// deterministic simulation.
//
// It promises:
//
//   - Determinism. Every answer is a function of the calls made, the clock it is given and the
//     seeded faults it is handed (SetFaults, SetPullFaults): no wall clock unless it is the
//     clock given, no map order in any answer, no goroutine but the streams' own.
//   - Docker's contract, by Docker's rules. What the package runtimetest checks of every
//     runtime holds here too, through the rules the Docker runtime applies itself
//     (runtime.Name, runtime.CheckStart, runtime.StopTimeout, docker.BindRoots): containers
//     carry the agent's id and only the agent's are touched; Create is idempotent by task and
//     container; a container that has run is never started again (ErrAlreadyStarted), and
//     with -tags runtimebug the guard goes as it goes in the Docker runtime.
//   - Docker's sharp edges, where the agent's correctness depends on them: a stop before the
//     start does nothing, so a start landing after it runs the container; Docker's own start
//     runs an exited container again (StartUnguarded, in tests); with SetFaults a call can be
//     slow, time out, and still have taken effect.
//   - Containers outlive the agent. The state is a file beside the journal (FileName, one
//     JSON state line then one line a change; a torn last line is ignored), so a restarted
//     agent finds what ran on, as it would on Docker.
//
// A container's command says what it does (DESIGN.md, "Runtimes"):
//
//	[] or ["run"]          runs until stopped; a stop ends it with exit code 143
//	["sleep", "2s"]        runs 2 s, then exits 0
//	["sleep", "2s", "3"]   runs 2 s, then exits 3
//	["exit", "3"]          exits 3 at once
//
// and the words of PROTOCOL.md §4's workloads, as Docker would decide them (workloads.go):
// `serve PORT`, `spew KIB` and `alloc MIB` run until stopped, but an alloc at or over the
// container's memory_mib is OOM-killed as it starts (137, OOMKilled); `linger D` exits 0 when
// its stop timeout exceeds D, else is killed (137); `write PATH TEXT` and `probe PORT` exit
// 0. Host ports are assigned at create (0: the lowest free from 32768). A health check passes
// when its words (after "CMD" and a program named testbox) exit 0 at once or are probe:
// HEALTHY after one interval; else UNHEALTHY after retries intervals.
//
// An image whose name contains fail-pull, fail-create or fail-start fails that step. Images
// and the registries they come from are modelled in images.go.
//
// Files: runtime.go (containers' lives and the calls on them), workloads.go (what a
// container's spec makes Docker do), images.go (images and registries), faults.go (calls
// that fail, are slow, or take effect and still fail), store.go (the file).
package simruntime
