package explore

import (
	"fmt"
	"strings"

	"github.com/agentd/agentd/internal/fsm"
)

// Script writes a trace as an engine script (internal/engine/testdata's format, engine's
// TestScripts): the same inputs to the real engine over a real journal, so a counterexample
// replays as a regression test once its expected output is written (-rewrite). What the
// world does that the engine never hears of directly — a call done, a container gone — is a
// comment, and the runtime's holdings are stated before each restart, which reads them.
func Script(b Bounds, trace []move, violation string) string {
	var sb strings.Builder
	cmd := func(c, input string) {
		sb.WriteString(c + "\n")
		if input != "" {
			sb.WriteString(input + "\n")
		}
		sb.WriteString("----\n\n")
	}
	note := func(format string, args ...any) { fmt.Fprintf(&sb, "# "+format+"\n", args...) }
	note("Found by the explorer (internal/explore), %d tasks x %d containers: %d steps to", b.Tasks, b.Containers, len(trace))
	note("%s", violation)
	sb.WriteString("\n")
	cmd("agent wait=1m", "")
	s := initial(b)
	for _, m := range trace {
		i := int(m.i)
		switch m.k {
		case mPayload, mAckLost, mStop, mResend:
			desired, id := "RUNNING", "m-"+arn(i)
			switch m.k {
			case mAckLost:
				note("the control plane will not hear the ack of %s", id)
			case mStop:
				desired, id = "STOPPED", "s-"+arn(i)
			case mResend:
				id = "r-" + arn(i)
				note("the control plane sends the cleaned task %s again", arn(i))
			}
			p := payload(i, desired, b.Containers, id)
			cmd("payload id="+id, string(p.Tasks[0]))
		case mExec:
			c := s.w.calls[i]
			note("the runtime does %s (its answer comes later)", c.a.Key())
		case mOrphan:
			note("a call the dead agent made lands: %s", s.w.orphans[i].a.Key())
		case mAnswer, mLost, mFail, mUnavailable:
			c := s.w.calls[i]
			res := c.res
			switch m.k {
			case mLost:
				res = fsm.Result{Kind: fsm.Unknown}
			case mFail:
				res = fsm.Result{Kind: fsm.Failed, Err: "the-runtime-said-no"}
			case mUnavailable:
				res = fsm.Result{Kind: fsm.Unavailable}
			}
			cmd(outcome(*c.a, res), "")
		case mAccept:
			cmd("answer accept=all", "")
		case mReject:
			note("the control plane refuses %s: a script cannot name a change id (the journal's is random): answered accept=all", s.w.report[0].ID)
			cmd("answer accept=all", "")
		case mThrottle, mThrottleRA:
			cmd("answer status=429", "")
		case mNoAnswer:
			note("the control plane accepted the report; its answer is lost")
			cmd("answer status=500", "")
		case mExit, mOOM:
			if s.down {
				note("%s/%s exits while the agent is down", arn(i), ctrName(int(m.j)))
			} else if m.k == mOOM {
				cmd(fmt.Sprintf("exit %s/%s code=137 oom", arn(i), ctrName(int(m.j))), "")
			} else {
				cmd(fmt.Sprintf("exit %s/%s code=1", arn(i), ctrName(int(m.j))), "")
			}
		case mRollback, mVanish:
			note("%s/%s goes from the runtime behind the agent's back", arn(i), ctrName(int(m.j)))
		case mTick:
			cmd("tick 1m", "")
		case mImages:
			note("an image collection cycle finds the disk low (the engine scripts run one with agent images=AGE, 10 minutes apart)")
			cmd("space free=1 total=100", "")
		case mCrash:
			note("the agent dies here")
		case mRecover:
			s.play(m, b)
			runtimeLines(&sb, s, b)
			cmd("crash", "")
			continue
		}
		s.play(m, b)
	}
	cmd("verify", "")
	return sb.String()
}

// outcome is an action's outcome as a script's outcome command.
func outcome(a fsm.Action, r fsm.Result) string {
	subject := a.Task + "/" + a.Container
	if a.Kind == fsm.ActRemoveImage {
		subject = a.Container
	}
	out := fmt.Sprintf("outcome %s %s %s", a.Kind, subject, r.Kind)
	if r.RuntimeID != "" {
		out += " id=" + r.RuntimeID
	}
	if r.Exited {
		out += fmt.Sprintf(" exit=%d", r.ExitCode)
	} else if r.Running && (a.Kind == fsm.ActInspect || a.Kind == fsm.ActFence) {
		out += " running"
	}
	if r.Err != "" {
		out += " err=" + strings.ReplaceAll(r.Err, " ", "-")
	}
	return out
}

// runtimeLines states what the runtime holds, for the restart that reads it.
func runtimeLines(sb *strings.Builder, s *state, b Bounds) {
	for i := range b.Tasks {
		for j := range b.Containers {
			c := &s.w.tasks[i].ctrs[j]
			what := "gone"
			switch {
			case c.running:
				what = "running"
			case c.exists && c.started:
				what = fmt.Sprintf("exited=%d", c.exit)
			case c.exists:
				what = "created"
			case c.inc == 0:
				continue
			}
			fmt.Fprintf(sb, "runtime %s/%s %s\n----\nok\n\n", arn(i), ctrName(j), what)
		}
	}
}
