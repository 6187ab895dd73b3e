// Package submit is the submitter's policy: when to report the projection's unsent changes,
// how many at once, and how long to wait after an answer that settled nothing. It is a pure
// node, like the core (internal/fsm): no I/O, clock, goroutine or log. The engine hands it what
// it saw, one Event at a time, to its one entry, Step(now, Event) Plan, and does what the Plan
// says; a throttled wait is a time in the plan, holding no lock and no slot, and the same code
// runs on a virtual clock in the simulation and in the scripts of testdata/.
//
// # The story of a report, in order
//
//  1. A burst begins (burst.go). Changes that follow a quiet spell (2 s with nothing to report)
//     begin a burst, counted from when the payloads that caused it reached the host (Polled,
//     its ReceivedAt), or from now when the host's own containers began it.
//  2. The burst's first report waits for the agent's slot (slot.go): where in its last
//     throttled burst the throttle served it — its turn's end after one 429, where its served
//     retry went after several; a new agent's, where the throttle served its first burst,
//     until a 429 proves it or its first bursts pass without one. A fleet handed one stop
//     comes back in the order the throttle served it, at its rate, with no agent knowing the
//     fleet's size. A burst the host began and that waits has the poller poll afresh
//     (Plan.Repoll, outage.go).
//  3. It gathers (gather.go): while the agent meets the throttle, the first report waits (at
//     most 1.5 s) for the changes the runtime is still making (Report.Coming), so a burst
//     spends one of the fleet's tokens, not two. Ready more than 50 ms past its slot (the host
//     made the burst late: a storm's stops), it goes behind the fleet's burst as the agent
//     last saw it, not at once into the crowd of agents placed before the host was ready
//     (burst.go).
//  4. It is chosen (send.go, isolate.go): one report in flight at a time, the oldest changes
//     first, at most 100 and 1 MiB, never a change held because the control plane refused it
//     alone, nor one queued behind it in its task (per-task order holds).
//  5. It is answered (answer.go). A settlement teaches the slot and a backlog's spacing; a
//     429's Retry-After is a floor, the retry spread over a window past it that grows while the
//     429s repeat (in a burst, not far past it) and shrinks when a retry is served, a burst's
//     first report refused naming nothing retried over the rest of the burst (unseen, in its
//     first 4.5 s: as long again as it has run, at most 3 s), one with no slot at its front,
//     where the throttle served it at once last time, unless the Retry-After names a turn (a
//     first step or more: the throttle keeps it) (retry.go); refused credentials retry slowly;
//     a report refused as a whole is split until the change at fault stands alone
//     (isolate.go); nothing answered waits about the longest backoff once the agent has a
//     place, while the poller probes the return.
//  6. Failures in a row are one streak (streak.go): one log line, few journal records, one
//     backoff that starts afresh when the kind changes, and the reporter's health.
//  7. A return (outage.go): the first answered poll after an outage places each report at
//     where the throttle last served the agent, counted from the return; a hang's return,
//     learnt by every agent at one instant, is spread further, and a report held in a short
//     hang is stretched to leave room for the agents who never saw it.
//  8. A restart (place.go): the place is kept at a clean stop (Stop) and taken back at the next
//     start (Restart) while fresh, so a fleet restarted together keeps its order.
//
// It promises: never more than one report in flight; at least the server's Retry-After after
// a 429 (DESIGN.md invariant 13), and jittered waits that never give up when none is given; no
// report body over protocol.MaxRequestBody, no reason over protocol.MaxReasonBytes; a change
// refused alone never holds up the others; one log line per change of outcome, not one per
// attempt.
package submit
