// Package explore is an exhaustive explorer of the agent's core: an explicit-state search
// (breadth first near the root, then depth first to the depth bound: search.go) of every
// interleaving of what the control plane and the runtime may do — answers, refusals, 429s,
// lost answers, re-sent payloads, exits, OOM kills, failed and lost calls, creates rolled
// back, containers gone, time, and a crash at any commit boundary followed by recovery from
// the journal, what the dead agent had out landing at any time after — within bounds (tasks,
// containers, depth, faults and crashes a path). States are hashed by a canonical encoding,
// symmetric over task ids.
//
// It protects, on every state it reaches, properties stated over the outside world's own
// record, not the agent's (check.go): no container removed before the control plane settled
// its task's STOPPED; no container started twice; no task or container STOPPED at the control
// plane while the runtime runs it; nothing RUNNING there the runtime never started; no image
// of a live task removed; and every record the core makes passes the invariant checker of
// DESIGN.md. And, as bounded checks under fairness: no reachable state where nothing can
// progress, and from states sampled, a cooperative world gets every STOPPED settled and
// every task cleaned. A violation comes with the shortest trace found for it (shorten.go),
// which Script writes as an engine script.
package explore
