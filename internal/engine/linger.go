package engine

import (
	"time"

	"github.com/agentd/agentd/internal/fsm"
)

// linger lets a burst wait, briefly, for the outcomes of runtime calls still running, so that
// they share its commit instead of each making one (raft's batching: what arrives while a
// commit is made goes into the next). Without it, the loop is faster than the calls it
// releases: each outcome found the loop idle and became a burst and a commit of its own —
// bench lifecycle's 10,000-task storm made 0.7–1.0 commits a task.
//
// It protects a lone task's latency: a burst waits only while another fast runtime call
// (create, start, inspect, remove) is out, never for a pull or a stop (they may take minutes
// or a stop timeout), a report or a poll; and at most half the last commit's time (≤
// maxLinger) in all, the same bound as the journal's own group commit (journal/append.go) —
// also when the call out waits for an executor slot behind slow ones. Only the loop's
// goroutine touches it (release, handleAction, drain).
type linger struct {
	// running counts the fast runtime calls released whose outcome the loop has not taken:
	// counted from their release, not from when their goroutine first runs — the loop is
	// back for its next input before the calls it just released have begun, and a count of
	// calls begun made most bursts close at once (bench lifecycle: 86% of them).
	running int
	wait    time.Duration // half the last commit's time, at most maxLinger
}

const maxLinger = time.Millisecond

// lingersFor says whether a burst may wait for a running call of this kind.
func lingersFor(k fsm.ActionKind) bool {
	switch k {
	case fsm.ActCreate, fsm.ActStart, fsm.ActInspect, fsm.ActRemove, fsm.ActFence:
		return true
	}
	return false
}

// started counts a call released to run; taken, its outcome reaching the loop.
func (l *linger) started(k fsm.ActionKind) {
	if lingersFor(k) {
		l.running++
	}
}

func (l *linger) taken(k fsm.ActionKind) {
	if lingersFor(k) {
		l.running--
	}
}

// committed sets the next bursts' wait from the time a commit took.
func (l *linger) committed(took time.Duration) { l.wait = min(took/2, maxLinger) }

// drain takes the inputs waiting into the burst (up to 256), then, while fast calls are
// still running, waits for their outcomes until the burst's linger is spent.
func (e *Engine) drain() { drainInto(e.inbox.in, &e.linger, e.handle) }

func drainInto(inputs <-chan Input, l *linger, take func(Input)) {
	var timer *time.Timer
	for n := 0; n < 256; n++ {
		select {
		case in := <-inputs:
			take(in)
			continue
		default:
		}
		if l.running <= 0 || l.wait <= 0 {
			break
		}
		if timer == nil {
			timer = time.NewTimer(l.wait) // one wait for the whole burst
			defer timer.Stop()
		}
		select {
		case in := <-inputs:
			take(in)
			continue
		case <-timer.C:
		}
		break
	}
}
