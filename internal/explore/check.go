package explore

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// safety is the first safety property broken in s ("": none). Each is stated over the world:
//   - REMOVED BEFORE SETTLED: a container removed before the control plane settled its task's
//     STOPPED (world.execute);
//   - RUN TWICE: a container started more than once by the runtime (world.execute);
//   - STOPPED BUT RUNNING: the control plane holds a task or container STOPPED while the
//     runtime runs the container;
//   - SENT AHEAD OF KNOWN: the control plane holds a container RUNNING the runtime never
//     started (world.settle);
//   - a payload applied twice shows as a task run twice: RUN TWICE counts starts over every
//     incarnation of a container, and the checker below names a payload or task applied twice
//     in the journal;
//   - IMAGE OF A LIVE TASK REMOVED (world.execute);
//
// and the journal's: every record the core made passes the invariant checker of DESIGN.md
// (fsm.Checker; ready.violations).
func (s *state) safety(b Bounds) string {
	if s.w.violation != "" {
		return s.w.violation
	}
	for i := range b.Tasks {
		t := &s.w.tasks[i]
		for j := range b.Containers {
			c := &t.ctrs[j]
			if c.running && (t.settled == event.StatusStopped || c.settled == event.StatusStopped) {
				return fmt.Sprintf("STOPPED BUT RUNNING: the control plane has %s/%s STOPPED while the runtime runs it", arn(i), ctrName(j))
			}
		}
	}
	return ""
}

// settledAll is the goal of a fair run: every task the control plane sent is cleaned and every
// change the agent made is settled.
func (s *state) settledAll(b Bounds) string {
	for i := range b.Tasks {
		if s.w.tasks[i].delivered {
			if t := s.n.n.State().Tasks[arn(i)]; t != nil {
				return fmt.Sprintf("task %s is still %s (desired %s, sent %s)", arn(i), t.Known, t.Desired, orNone(t.Sent))
			}
		}
	}
	if n := s.n.n.State().OutboxLen(); n > 0 {
		return fmt.Sprintf("%d changes unsettled", n)
	}
	return ""
}

// fair reports whether a move is one a cooperative world makes: no fault, no crash.
func fair(m move) bool { return m.k < faultMoves || m.k == mRecover }

// stuck names a state where nothing can progress: no fair move is enabled, and yet the goal is
// not reached ("": not stuck).
func (s *state) stuck(b Bounds, moves []move) string {
	if slices.ContainsFunc(moves, fair) {
		return ""
	}
	if why := s.settledAll(b); why != "" {
		return "NOTHING CAN PROGRESS: " + why
	}
	return ""
}

// fairOrder is the order a fair run prefers its moves in: answers first, then the runtime's
// work, the control plane's answers and orders, and time last.
var fairOrder = []kind{mRecover, mAnswer, mExec, mOrphan, mAccept, mStop, mPayload, mTick}

// eventually runs s forward fairly — every call done and answered, every report accepted,
// every task stopped, time passing when nothing else does — and says what is not reached
// within the bound: every STOPPED accepted and every accepted task cleaned ("": reached).
// First, without the control plane's stops, every container of a task that runs on runs
// (runsEventually).
func (s *state) eventually(b Bounds, steps int) (string, []move) {
	if why, path := s.runsEventually(b, steps); why != "" {
		return why, path
	}
	return s.fairRun(b, steps, fairOrder, func(c *state) string { return c.settledAll(b) })
}

// runsEventually runs s forward fairly, the control plane stopping nothing, and names a
// container that never runs ("": each runs) of a task that runs on here: delivered, its stop
// not sent, not on its way down, none of its containers STOPPED or gone from the runtime
// before it started (lost, or removed by a dead agent's fence: the next agent cannot tell
// that from one that ran and went, and declares it STOPPED). A container two dead agents
// asked to start is fenced and made again, and runs.
func (s *state) runsEventually(b Bounds, steps int) (string, []move) {
	var owed [][2]int
	for i := range b.Tasks {
		w, t := &s.w.tasks[i], s.n.n.State().Tasks[arn(i)]
		if !w.delivered || w.stopSent || t == nil || t.Stopping() {
			continue
		}
		runsOn := true
		for j := range b.Containers {
			c, wc := t.Container(ctrName(j)), &w.ctrs[j]
			gone := c != nil && c.RuntimeID != "" && (!wc.exists || c.RuntimeID != runtimeID(i, j, wc.inc)) && wc.starts == 0
			fencing := slices.ContainsFunc(s.w.orphans, func(o call) bool {
				return o.a.Kind == fsm.ActFence && o.a.Task == arn(i) && o.a.Container == ctrName(j)
			})
			runsOn = runsOn && c != nil && c.Known != event.StatusStopped && wc.lost == 0 && !gone && !fencing
		}
		for j := range b.Containers {
			if runsOn {
				owed = append(owed, [2]int{i, j})
			}
		}
	}
	if len(owed) == 0 {
		return "", nil
	}
	why, path := s.fairRun(b, steps, runOrder, func(c *state) string {
		for _, o := range owed {
			if c.w.tasks[o[0]].ctrs[o[1]].starts == 0 {
				return fmt.Sprintf("%s/%s never runs, its task not stopped", arn(o[0]), ctrName(o[1]))
			}
		}
		return ""
	})
	return why, path
}

// runOrder is fairOrder without the control plane's stops.
var runOrder = slices.DeleteFunc(slices.Clone(fairOrder), func(k kind) bool { return k == mStop })

// fairRun runs s forward fairly, each step the first enabled move in order, until goal says
// "" — else what is not reached when no move is left or after steps.
func (s *state) fairRun(b Bounds, steps int, order []kind, goal func(*state) string) (string, []move) {
	var path []move
	c := s.clone()
	c.faults, c.crashes = 0, 0
	for range steps {
		if goal(c) == "" {
			return "", nil
		}
		ms := c.moves(b)
		var next *move
		for _, k := range order {
			if at := slices.IndexFunc(ms, func(m move) bool { return m.k == k }); at >= 0 {
				next = &ms[at]
				break
			}
		}
		if next == nil {
			if why := goal(c); why != "" {
				return "NOT EVENTUALLY: a fair world leaves " + why, path
			}
			return "", nil
		}
		path = append(path, *next)
		r := c.play(*next, b)
		if len(r.violations) > 0 {
			return r.violations[0], path
		}
		if why := c.safety(b); why != "" {
			return why, path
		}
	}
	return fmt.Sprintf("NOT EVENTUALLY: %d fair steps and %s", steps, goal(c)), path
}

var seed = maphash.MakeSeed()

// key is s's canonical encoding, hashed: the agent's projection and volatile state and the
// world, per task, with task ids left out and the tasks sorted — symmetry over task ids: two
// states that differ only by which task is which are one state. Sequence numbers, times and
// ids are left out too: what the agent and the world do next does not depend on them.
func (s *state) key(b Bounds) uint64 {
	per := make([]string, b.Tasks)
	var buf []byte
	for i := range b.Tasks {
		buf = s.encodeTask(buf[:0], i, b)
		per[i] = string(buf)
	}
	slices.Sort(per)
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteByte(byte(s.faults))
	h.WriteByte(byte(s.crashes))
	if s.down {
		h.WriteByte(2)
	}
	if s.w.report != nil {
		h.WriteByte(1)
	}
	for _, p := range per {
		h.WriteString(p)
		h.WriteByte(0xff)
	}
	return h.Sum64()
}

func (s *state) encodeTask(buf []byte, i int, b Bounds) []byte {
	id := arn(i)
	w := &s.w.tasks[i]
	flags := func(bs ...bool) {
		var v byte
		for k, x := range bs {
			if x {
				v |= 1 << k
			}
		}
		buf = append(buf, v)
	}
	str := func(v string) { buf = append(buf, v...); buf = append(buf, 0) }
	flags(w.delivered, w.acked, w.stopSent, w.resent)
	flags(s.n.retrying, s.w.spaceAsked)
	str(string(w.settled))
	buf = append(buf, byte(w.image))
	for j := range b.Containers {
		c := &w.ctrs[j]
		str(string(c.settled))
		buf = append(buf, byte(c.inc), byte(c.starts), byte(c.lost), byte(c.exit))
		flags(c.exists, c.started, c.running, c.removed, c.exitSent, c.fenced)
	}
	st := s.n.n.State()
	if t := st.Tasks[id]; t != nil {
		str(string(t.Known))
		str(string(t.Desired))
		str(string(t.Sent))
		flags(t.StopCause != "", t.Rejected, !t.StoppedAt.IsZero() && !s.now().Before(t.CleanupDue(fsm.Config{CleanupWait: cleanupWait})))
		buf = binary.AppendUvarint(buf, uint64(len(t.Pending)))
		for _, m := range t.Messages {
			str(m[:1])
		}
		for _, c := range t.Containers {
			str(string(c.Known))
			str(string(c.Sent))
			str(string(c.InFlight))
			str(c.Reason)
			str(c.RuntimeID[min(len(c.RuntimeID), len("rt-"+id)):])
			flags(c.Removed, c.RolledBack, c.ImageID != "", c.Again)
			buf = binary.AppendUvarint(buf, uint64(len(c.Pending)))
			buf = append(buf, byte(c.StartsAsked))
		}
	} else if _, gone := st.Tombstones[id]; gone {
		str("tombstone")
	}
	if img := st.Images[imageID(i)]; img != nil {
		str("image")
	}
	for _, seq := range sortedSeqs(st.Outbox) {
		if ch := st.Outbox[seq]; ch.Task == id {
			str(ch.Container + "=" + string(ch.Status))
		}
	}
	var calls []string
	for _, c := range s.w.calls {
		calls = append(calls, callKey(c, id, "call"))
	}
	for _, c := range s.w.orphans {
		calls = append(calls, callKey(c, id, "orphan"))
	}
	for _, wk := range s.n.wakes {
		if wk.Task == id {
			calls = append(calls, "wake")
		}
	}
	for _, c := range s.w.report {
		if c.TaskARN == id {
			calls = append(calls, "report "+c.Container+"="+c.Status)
		}
	}
	slices.Sort(calls)
	for _, c := range calls {
		if c != "" {
			str(c)
		}
	}
	return buf
}

// callKey encodes a call of task id (or of its image) without the task's id; "" for others.
func callKey(c call, id, what string) string {
	if c.a.Task != id && c.a.Container != imageID(index(id)) {
		return ""
	}
	ctr := c.a.Container
	if c.a.Task == "" {
		ctr = "image"
	}
	return fmt.Sprintf("%s %s %s %v %s %v %v", what, c.a.Kind, ctr, c.done, c.res.Kind, c.res.Running, c.res.Exited)
}

func sortedSeqs(m map[uint64]*fsm.Change) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// describe is a state in a few lines, for a counterexample's end.
func (s *state) describe(b Bounds) string {
	var sb strings.Builder
	for i := range b.Tasks {
		w := &s.w.tasks[i]
		fmt.Fprintf(&sb, "  %s: control plane has %s", arn(i), orNone(w.settled))
		if t := s.n.n.State().Tasks[arn(i)]; t != nil {
			fmt.Fprintf(&sb, "; agent has %s (sent %s)", t.Known, orNone(t.Sent))
		} else if _, ok := s.n.n.State().Tombstones[arn(i)]; ok {
			sb.WriteString("; agent cleaned it")
		}
		for j := range b.Containers {
			c := &w.ctrs[j]
			fmt.Fprintf(&sb, "; %s: runtime exists=%v running=%v starts=%d", ctrName(j), c.exists, c.running, c.starts)
		}
		sb.WriteString("\n")
	}
	return sb.String()
}
