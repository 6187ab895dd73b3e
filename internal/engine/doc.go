// Package engine is the agent around its core. The core is one node (fsm.Node, in
// etcd-io/raft's RawNode shape): the engine hands it every input — a payload, a runtime
// call's outcome, an exit, a report's answer, what time made due — through its one Step, and
// the node answers with a Ready: an instruction of the records to journal and the effects they
// allow. The engine journals the records, only then carries out the effects, in the order
// etcd-io/raft taught — journal first, then report, then act — and tells the node what it did
// (the Advance input). The results of acting come back as new inputs. What an input means,
// which record follows, which decided call may go (the Gate over the calls out), whom a freed
// removal slot goes to, when a held exit goes in again, how an image cycle runs and what a
// compaction may drop are the node's business; it owns the state those decisions read. The
// engine owns time (the deadline heap, backoff lengths, linger, intake, memory release), I/O
// (journal, executor, poller, streams), health, metrics and logs.
//
// The engine splits as raft splits rawnode.go from node.go: ready.go is the burst — inputs
// into the node, its Ready committed and released, the Advance — on whatever goroutine calls
// it (Step: tests, the simulation, the scripts); loop.go is the goroutines (Run, shutdown).
//
// # The burst protocol
//
// The loop works in bursts. A burst takes the inputs that are waiting (up to 256), and those
// of fast runtime calls still out for at most half a commit (linger.go), then has the node
// decide until nothing more follows from the journal alone, then commits once:
//
//  1. Each input goes to the node (handle.go), which maps it to records. Each record is
//     numbered, applied to the projection at once — so the next input and decision see it —
//     and kept in the node's Ready. A record the projection refuses is a bug in the core: the
//     node drops it, never journaled, and quarantines its task (fsm/nodequarantine.go), so a
//     bug never makes an agent that cannot restart; the engine names it (quarantine.go).
//  2. The burst ends its inputs with a Tick carrying the deadlines that came (schedule.go)
//     and whether the wait before asking an unanswering runtime again is over: the node
//     decides for every task the records touched and time made due, returns more records
//     and puts the runtime calls its Gate lets go into the Ready — each with its intent
//     among the records before it — with the deadlines to keep, the retries to time and the
//     questions of the runtime. The calls a burst decides sit in a layer over those out, so
//     the Gate holds the second call of a burst like any other, yet none is out yet.
//  3. The engine takes the Ready, puts its deadlines in its heap (cleanup deadlines with
//     jitter from its seeded generator) and appends its records in one commit (one fsync
//     pair for all of them); when a snapshot is due, it and its snapshot_taken record go in
//     that same commit, and the node plans the compaction it allows over the journal's facts.
//  4. Only once that commit has returned is the report chosen, from the durable outbox; the
//     node is told what is released (Advance: its calls are out now, its questions asked,
//     the calls withheld decided again); then the effects are released in the order of
//     Ready's fields: the report first (the request slot is what throttling makes scarce),
//     then the acknowledgements (the payloads whose ids are all among Acks are answered, and
//     the poller acknowledges them), then the runtime actions (pulls on slots of their own,
//     so a slow registry never holds up a stop), then the compaction, then the questions of
//     the runtime: its free disk space for an image collection cycle (images.go), and what it
//     holds (reconcile.go).
//  5. If the commit fails, the effects are dropped — they were decided on state that never
//     became true — the payloads are answered with the error, the projection is rebuilt from
//     the journal by the one load path (Load) and handed to the node with the failure
//     (Advance), which counts none of the burst's calls as out, decides every task again and
//     keeps the exits journaled in the burst to hand in again, since nothing else re-derives
//     them.
//
// Recovery, reconciliation, snapshots and shutdown are bursts too, so there is one commit path.
//
// What waits for what: a payload is acknowledged only after the commit holding its records;
// a runtime call starts only after the commit holding the decision that asked for it; a task
// is cleaned only through a journaled stopped-acked, which the core decides only from a
// journaled settlement of the task's STOPPED.
//
// It promises:
//   - Nothing acts on state that is not durable.
//   - One goroutine owns the projection. Runtime calls and HTTP run on an Executor and report
//     back as inputs, so a throttled report or a slow runtime holds nothing the loop needs.
//   - Waiting is cheap: a task awaiting its acknowledgement is a row in the projection, a
//     cleanup deadline is an entry in one heap, and one timer serves them all.
//   - Restart resumes exactly: snapshot + tail rebuild the projection, the runtime is
//     reconciled, cleanup deadlines come from journaled stop times, dependency deadlines
//     (start_timeout_s) from the task's journaled arrival.
package engine
