package explore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// state is one point of the search: the agent, the world, the time (in ticks) and what is
// left of the path's budget of faults and crashes.
type state struct {
	n       node
	w       world
	ticks   int
	faults  int8 // faults left on this path
	crashes int8 // crashes left on this path
	down    bool // the agent crashed and has not recovered yet
}

func (s *state) now() time.Time { return t0.Add(time.Duration(s.ticks) * cleanupWait) }

// t0 is the explorer's epoch, the engine scripts' too.
var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func (s *state) clone() *state {
	c := *s
	c.n, c.w = s.n.clone(), s.w.clone()
	return &c
}

// kind is what a move does. The ones after faultMoves cost the path a fault.
type kind uint8

const (
	mPayload     kind = iota // the control plane sends task i's payload; the agent acks it
	mStop                    // the control plane sends task i desired STOPPED
	mExec                    // the runtime does call i
	mAnswer                  // call i's answer reaches the agent
	mOrphan                  // a call out when the agent crashed lands, at any time after (also after recovery)
	mAccept                  // the control plane accepts the report
	mTick                    // time passes to the next deadline
	faultMoves               // —
	mAckLost                 // task i's payload reaches the agent; the ack is lost: it comes again
	mResend                  // the control plane sends a cleaned task again
	mFail                    // call i fails: nothing happened
	mUnavailable             // the runtime does not answer call i: nothing happened
	mLost                    // call i happened; its answer is lost (the agent hears a timeout)
	mThrottle                // 429, no Retry-After
	mThrottleRA              // 429 with Retry-After
	mReject                  // the control plane refuses the report's first change
	mNoAnswer                // the control plane accepted the report; its answer is lost
	mExit                    // a running container i/j exits (code 1)
	mOOM                     // … is killed for its memory (137)
	mRollback                // a container created and never started goes (a create rolled back)
	mVanish                  // a container goes behind the agent's back
	mImages                  // an image collection cycle, the disk low
	mCrash                   // the agent dies at a commit boundary
	mRecover                 // … and starts again from its journal (what it had out landed or not meanwhile)
)

// move is one edge of the search.
type move struct {
	k    kind
	i, j int8 // task and container, or the call's index
}

func (m move) String() string {
	names := map[kind]string{mPayload: "payload", mStop: "stop", mExec: "exec", mAnswer: "answer", mOrphan: "orphan-lands",
		mAccept: "accept", mTick: "tick", mAckLost: "payload-ack-lost", mResend: "resend-cleaned", mFail: "call-fails",
		mUnavailable: "call-unavailable", mLost: "call-answer-lost", mThrottle: "429", mThrottleRA: "429-retry-after",
		mReject: "refuse-change", mNoAnswer: "report-answer-lost", mExit: "exit", mOOM: "oom", mRollback: "rollback",
		mVanish: "vanish", mImages: "image-cycle", mCrash: "crash", mRecover: "recover"}
	return fmt.Sprintf("%s(%d,%d)", names[m.k], m.i, m.j)
}

// moves lists every move enabled in s, within the bounds.
func (s *state) moves(b Bounds) []move {
	var out []move
	add := func(k kind, i, j int) {
		if k > faultMoves && k != mCrash && s.faults <= 0 || k == mCrash && s.crashes <= 0 {
			return
		}
		out = append(out, move{k, int8(i), int8(j)})
	}
	// What the agent had out when it died may land at any time after: while it is down, after
	// its successor asked the runtime what it holds, after it decided from that.
	for k := range s.w.orphans {
		out = append(out, move{mOrphan, int8(k), 0})
	}
	if s.down {
		// Down: the runtime's containers may exit or go.
		out = append(out, move{k: mRecover})
		s.runtimeMoves(b, add)
		return out
	}
	for i := range b.Tasks {
		t := &s.w.tasks[i]
		if !t.acked {
			add(mPayload, i, 0)
			add(mAckLost, i, 0)
		}
		if t.delivered && !t.stopSent {
			add(mStop, i, 0)
		}
		if _, gone := s.n.n.State().Tombstones[arn(i)]; gone && !t.resent {
			add(mResend, i, 0)
		}
	}
	if s.w.spaceAsked {
		add(mImages, 0, 0)
	}
	s.runtimeMoves(b, add)
	for k, c := range s.w.calls {
		if !c.done {
			add(mExec, k, 0)
			add(mFail, k, 0)
			add(mUnavailable, k, 0)
		} else {
			add(mAnswer, k, 0)
			add(mLost, k, 0)
		}
	}
	if s.w.report != nil {
		add(mAccept, 0, 0)
		add(mThrottle, 0, 0)
		add(mThrottleRA, 0, 0)
		add(mReject, 0, 0)
		add(mNoAnswer, 0, 0)
	}
	if s.tickUseful() {
		add(mTick, 0, 0)
	}
	add(mCrash, 0, 0)
	return out
}

// runtimeMoves are what the runtime does by itself: an exit, an OOM kill, a create rolled
// back, a container gone.
func (s *state) runtimeMoves(b Bounds, add func(k kind, i, j int)) {
	for i := range b.Tasks {
		for j := range b.Containers {
			c := &s.w.tasks[i].ctrs[j]
			if c.running {
				add(mExit, i, j)
				add(mOOM, i, j)
			}
			if c.exists && !c.started {
				add(mRollback, i, j)
			}
			if c.exists {
				add(mVanish, i, j)
			}
		}
	}
}

// tickUseful: something waits for time — a call's backoff, a cleanup's wait, a report after
// one that was not settled.
func (s *state) tickUseful() bool {
	return s.n.retrying || len(s.n.wakes) > 0 || s.w.report == nil && s.n.n.State().OutboxLen() > 0
}

// payload is task i's payload, as the control plane sends it.
func payload(i int, desired string, ctrs int, id string) fsm.PayloadArrived {
	var cs []map[string]any
	for j := range ctrs {
		cs = append(cs, map[string]any{"name": ctrName(j), "image": image(i), "essential": j == 0})
	}
	raw, _ := json.Marshal(map[string]any{"arn": arn(i), "desired_status": desired, "containers": cs})
	return fsm.PayloadArrived{MessageID: id, Tasks: []json.RawMessage{raw}}
}

// play makes a move on s (a clone the caller owns) and returns the burst it came to.
func (s *state) play(m move, b Bounds) ready {
	if m.k > faultMoves && m.k != mCrash {
		s.faults--
	}
	now := s.now()
	w := &s.w
	i := int(m.i)
	var in fsm.Input
	switch m.k {
	case mPayload, mAckLost:
		w.tasks[i].delivered, w.tasks[i].acked = true, m.k == mPayload
		in = payload(i, "RUNNING", b.Containers, "m-"+arn(i))
	case mStop:
		w.tasks[i].stopSent = true
		in = payload(i, "STOPPED", b.Containers, "s-"+arn(i))
	case mResend:
		w.tasks[i].resent = true
		in = payload(i, "RUNNING", b.Containers, "r-"+arn(i))
	case mExec:
		c := &w.calls[i]
		c.done, c.res = true, w.execute(*c.a, b.Tasks)
		return ready{}
	case mAnswer, mLost, mFail, mUnavailable:
		c := w.calls[i]
		w.calls = append(w.calls[:i], w.calls[i+1:]...)
		res := c.res
		switch m.k {
		case mLost:
			res = fsm.Result{Kind: fsm.Unknown, Err: "context deadline exceeded"}
		case mFail:
			res = fsm.Result{Kind: fsm.Failed, Err: "the runtime said no"}
		case mUnavailable:
			res = fsm.Result{Kind: fsm.Unavailable, Err: "runtime unavailable"}
		}
		in = fsm.ActionFinished{Action: *c.a, Result: res}
	case mOrphan:
		c := w.orphans[i]
		w.orphans = append(w.orphans[:i], w.orphans[i+1:]...)
		w.execute(*c.a, b.Tasks)
		return ready{}
	case mAccept, mReject, mNoAnswer, mThrottle, mThrottleRA:
		sent := w.report
		w.report = nil
		ans := fsm.ReportAnswered{Sent: sent}
		switch m.k {
		case mAccept, mReject:
			settled := &event.ChangesSettled{}
			for k, c := range sent {
				if k == 0 && m.k == mReject {
					settled.Rejected = append(settled.Rejected, event.Rejection{ID: c.ID, Error: "unknown_task"})
					continue
				}
				settled.Accepted = append(settled.Accepted, c.ID)
			}
			ans.Settled = settled
			w.settle(sent)
		case mNoAnswer:
			w.settle(sent)
		}
		in = ans
	case mExit, mOOM:
		c := &w.tasks[i].ctrs[m.j]
		c.running, c.exit = false, 1
		if m.k == mOOM {
			c.exit = 137
		}
		w.cursor++
		if s.down {
			return ready{} // the restarted agent finds it exited
		}
		c.exitSent = true
		in = fsm.ContainerExited{Task: arn(i), Container: ctrName(int(m.j)), RuntimeID: runtimeID(i, int(m.j), c.inc),
			ExitCode: c.exit, OOMKilled: m.k == mOOM, Cursor: w.cursor}
	case mRollback, mVanish:
		c := &w.tasks[i].ctrs[m.j]
		if !c.started {
			c.lost++
		}
		c.exists, c.running = false, false
		return ready{}
	case mTick:
		s.ticks++
		now = s.now()
		s.n.retrying = false
	case mImages:
		w.spaceAsked = false
		in = fsm.ImageSpace{Free: 1, Total: 100}
	case mCrash:
		s.crashes--
		for _, c := range w.calls {
			if !c.done {
				w.orphans = append(w.orphans, c)
			}
		}
		w.calls, w.report, w.spaceAsked, s.down = nil, nil, false, true
		return ready{}
	case mRecover:
		s.down = false
		r := s.n.recoverFrom(now, func(st *fsm.State) fsm.RuntimeObserved { return w.observe(st, b.Tasks, b.Containers) })
		s.release(r)
		return r
	}
	var ins []fsm.Input
	if in != nil {
		ins = append(ins, in)
	}
	r := s.n.burst(now, ins...)
	switch m.k {
	case mThrottle, mThrottleRA, mNoAnswer:
		s.releaseCalls(r) // the next report waits for its time (a tick)
	default:
		s.release(r)
	}
	return r
}

// release hands the burst's calls to the runtime and, when none is out, its report to the
// control plane.
func (s *state) release(r ready) {
	s.releaseCalls(r)
	if s.w.report == nil {
		s.w.report = s.n.report()
	}
}

func (s *state) releaseCalls(r ready) {
	s.w.spaceAsked = s.w.spaceAsked || r.imageSpace
	for _, a := range r.actions {
		s.w.calls = append(s.w.calls, call{a: &a})
	}
}
