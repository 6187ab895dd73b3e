// Package engine is the agent: it hands every input — a payload, a runtime call's outcome, an
// exit, a report's answer, a timer — to the projection's pure core (fsm.State.Step and
// Decide), journals the records the core returns, and only then carries out the effects they
// allow, in the order etcd-io/raft taught: journal first, then report, then act. The results
// of acting come back as new inputs. What an input means, and which record follows, is the
// core's business. So is when a decided call may go: the engine hands the core what it has
// out as data (fsm.InFlight), and the core's Gate says which call waits for which (an inspect
// for its start, a removal for a create, a pull for image removals), when a removal queues for
// a slot and whom a freed slot goes to (fsm.RemovalQueue); the core says when a held exit is
// handed in again or dropped (HeldExitAfter) and plans each image cycle (PlanImageCycle:
// deferral while pulls are out, sit-outs, low disk) and what a compaction may forget
// (PlanCompaction, over the journal's facts the engine reads for it). The engine owns time,
// I/O, slots, retries and the bookkeeping of what is in flight.
//
// # The burst protocol
//
// The loop works in bursts. A burst takes the inputs that are waiting (up to 256), and those
// of fast runtime calls still out for at most half a commit (linger.go), then decides until
// nothing more follows from the journal alone, then commits once:
//
//  1. Each input goes to the core, which returns records. Each record is numbered (the loop
//     is the journal's only appender, and Append checks the numbers), applied to the
//     projection at once — so the next input and decision see it — and kept in the burst. A
//     record the projection refuses is a bug in the core: it is dropped, never journaled, and
//     its task quarantined (quarantine.go), so a bug never makes an agent that cannot restart.
//  2. Decide runs over the tasks the records touched and over those whose timers are due: it
//     returns more records (applied the same way) and runtime actions. Effects — runtime
//     actions, payload acknowledgements, a compaction, the questions of the runtime — are
//     kept in the burst's Ready as plain data, never started. The calls a burst decides sit
//     in a layer over those out (fsm.Over), so the Gate holds the second call of a burst
//     like any other, yet nothing about them is recorded as out.
//  3. The burst's records are appended in one commit (one fsync pair for all of them); when a
//     snapshot is due, it and its snapshot_taken record go in that same commit.
//  4. Only once that commit has returned is the report chosen, from the durable outbox, and
//     the bookkeeping of the effects recorded (the calls out, the questions asked, the report
//     begun); then the effects are released in the order of Ready's fields: the report first
//     (the request slot is what throttling makes scarce), then the acknowledgements (the
//     payloads whose ids are all among Acks are answered, and the poller acknowledges them),
//     then the runtime actions (pulls on slots of their own, so a slow registry never holds
//     up a stop), then the compaction, then the questions of the runtime: its free disk
//     space for an image collection cycle (images.go), and what it holds (reconcile.go).
//  5. If the commit fails, the effects are dropped — they were decided on state that never
//     became true, and nothing about them was recorded, so nothing is undone — the payloads
//     are answered with the error, the projection is rebuilt from the journal by the one load
//     path (Load), and exits journaled in the burst are kept to be handed in again, since
//     nothing else re-derives them.
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
