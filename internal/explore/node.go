package explore

import (
	"slices"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// node is the agent under exploration: the core's node (fsm.Node), driven as the engine
// drives it — inputs, then a Tick with the deadlines that came, then its Ready carried out
// and acknowledged with an Advance — plus the little the engine keeps beside it: the
// deadlines the node asked for (time is the caller's) and the report (the engine's submitter
// chooses it; here, whenever none is out, the oldest unsent changes).
type node struct {
	n        *fsm.Node
	wakes    []fsm.Wake // deadlines the node asked for, not yet come
	retrying bool       // calls wait out a backoff: the next tick ends it
}

// cleanupWait is the agent's --cleanup-wait, the backoff of a failed call and the image
// collection interval: one tick passes them all.
const cleanupWait = time.Minute

var nodeConfig = fsm.NodeConfig{Config: fsm.Config{CleanupWait: cleanupWait},
	Images: fsm.ImageConfig{PerCycle: 1, LowFreePercent: 10}, ImageInterval: cleanupWait}

// ready is what one burst came to: the records journaled, the calls released, whether the
// runtime's disk was asked about, and what broke.
type ready struct {
	records    []event.Record
	actions    []fsm.Action
	imageSpace bool
	violations []string // records the core made that the projection refuses (Ready.Dropped)
}

func (n *node) clone() node {
	return node{n: n.n.Clone(), wakes: slices.Clone(n.wakes), retrying: n.retrying}
}

// burst hands the node the inputs, then a Tick with the deadlines that have come, takes its
// Ready, keeps its deadlines, and acknowledges it all released.
func (n *node) burst(now time.Time, ins ...fsm.Input) ready {
	var r ready
	for _, in := range ins {
		if err := n.n.Step(now, in); err != nil {
			r.violations = append(r.violations, "INPUT: "+err.Error())
		}
	}
	var due []string
	n.wakes = slices.DeleteFunc(n.wakes, func(w fsm.Wake) bool {
		if !w.At.After(now) {
			due = append(due, w.Task)
			return true
		}
		return false
	})
	_ = n.n.Step(now, fsm.Tick{Due: due})
	rd := n.n.Ready()
	r.records, r.actions, r.imageSpace = rd.Records, rd.Actions, rd.ImageSpace
	for _, d := range rd.Dropped {
		r.violations = append(r.violations, "INVARIANT: the core made a record the projection refuses: "+d.Err.Error())
	}
	n.wakes = append(n.wakes, rd.Wakes...)
	for _, rt := range rd.Retries {
		_ = n.n.Step(now, fsm.RetryAt{Key: rt.Key, At: now.Add(cleanupWait)})
		n.retrying = true
	}
	_ = n.n.Step(now, fsm.Advance{})
	return r
}

// recoverFrom starts the agent again on the journal's projection (what the node held at the
// last commit boundary; fsm promises a snapshot of it equals the journal replayed): what it
// kept in memory is gone; it journals its start and what the runtime holds, offers refused
// changes again and schedules the cleanups due, as the engine's Recover does, then decides.
func (n *node) recoverFrom(now time.Time, obs func(*fsm.State) fsm.RuntimeObserved) ready {
	st := n.n.State().Clone()
	n.n, n.wakes, n.retrying = fsm.NewNode(st, nodeConfig), nil, false
	for _, t := range st.SortedTasks() {
		if t.Known == event.StatusStoppedAcked {
			n.wakes = append(n.wakes, fsm.Wake{Task: t.ARN, At: t.CleanupDue(nodeConfig.Config)})
		}
	}
	return n.burst(now, fsm.OwnRecord{Event: &event.AgentStarted{AgentID: "agent-explore", JournalID: "J"}}, obs(st), fsm.Reoffered{})
}

// report is the next report, when none is out: the oldest unsent changes.
func (n *node) report() []protocol.StateChange {
	st := n.n.State()
	if st.OutboxLen() == 0 {
		return nil
	}
	var out []protocol.StateChange
	for _, c := range st.Pending(10) {
		out = append(out, protocol.StateChange{ID: c.ID, TaskARN: c.Task, Container: c.Container, Status: string(c.Status),
			ExitCode: c.ExitCode, Reason: c.Reason, At: c.At, Health: string(c.Health)})
	}
	return out
}
