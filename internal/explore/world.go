package explore

import (
	"fmt"
	"strconv"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/runtime"
)

// The world is the outside the agent acts on, with its own record of what happened: what the
// control plane settled, what the runtime started, ran and removed. The explorer's safety
// properties are stated over it (check.go), never over the agent's journal, so an agent that
// believed its own wrong records would still be caught.

const (
	maxTasks      = 4
	maxContainers = 3
)

// world is a value: copying it copies everything but the slices, which clone copies.
type world struct {
	tasks   [maxTasks]taskWorld
	calls   []call // released by the agent and not yet answered
	orphans []call // out when the agent crashed: they may still land, and nobody hears
	report  []protocol.StateChange
	cursor  int64 // the runtime's exit stream position
	nCtrs   int   // containers a task has
	// spaceAsked: the agent asked how full the runtime's disk is (an image collection cycle)
	spaceAsked bool
	// violation is the first safety property the world saw broken ("": none).
	violation string
}

// taskWorld is one task as the control plane and the runtime know it.
type taskWorld struct {
	delivered, acked bool // its payload reached the agent / the agent's ack reached the control plane
	stopSent         bool // the control plane sent desired STOPPED
	resent           bool // sent again after the agent cleaned it
	settled          event.Status
	image            int8 // 0: not pulled, 1: present, 2: removed
	ctrs             [maxContainers]ctrWorld
}

// ctrWorld is one container as the runtime and the control plane know it. The runtime's own
// record: how many incarnations were made, how many starts it ran (over all incarnations).
type ctrWorld struct {
	settled                  event.Status // the latest status the control plane accepted for it
	inc                      int8         // incarnations made (a rolled-back create makes one more)
	exists, started, running bool
	removed                  bool // removed by the agent
	fenced                   bool // … by a fence, since its last create: made again, it is no longer removed
	starts                   int8
	lost                     int8 // incarnations lost before they started (rolled back, vanished)
	exitSent                 bool // its exit reached the agent (which may hold it until its start is journaled)
	exit                     int
}

// call is a runtime call the agent made: done once the runtime did it, with what it came to.
// The action is shared by every state that holds the call (it never changes): a search holds
// hundreds of thousands of states.
type call struct {
	a    *fsm.Action
	done bool
	res  fsm.Result
}

func (w *world) clone() world {
	c := *w
	c.calls = append([]call(nil), w.calls...)
	c.orphans = append([]call(nil), w.orphans...)
	c.report = append([]protocol.StateChange(nil), w.report...)
	return c
}

func (w *world) fail(format string, args ...any) {
	if w.violation == "" {
		w.violation = fmt.Sprintf(format, args...)
	}
}

// arn and container names: t1…, c1….
func arn(i int) string     { return "t" + strconv.Itoa(i+1) }
func ctrName(j int) string { return "c" + strconv.Itoa(j+1) }
func image(i int) string   { return "img-" + arn(i) + ":1" }
func imageID(i int) string { return "sha256:" + arn(i) }
func runtimeID(i, j int, inc int8) string {
	return "rt-" + arn(i) + "-" + ctrName(j) + "-" + strconv.Itoa(int(inc))
}

func index(arnOrName string) int {
	n, _ := strconv.Atoi(arnOrName[1:])
	return n - 1
}

// container is the world's record of an action's container.
func (w *world) container(a fsm.Action) (*taskWorld, *ctrWorld) {
	t := &w.tasks[index(a.Task)]
	return t, &t.ctrs[index(a.Container)]
}

// runtimeState is the runtime's view of a container, as runtime.CheckStart reads it.
func (c *ctrWorld) runtimeState(id string) runtime.State {
	st := runtime.State{ID: id, Running: c.running, Exited: c.started && !c.running, ExitCode: c.exit}
	return st
}

// execute does what the runtime does for a call and returns its outcome, as engine/act.go's
// call sorts it. A start goes through runtime.CheckStart, the guard both runtimes apply.
func (w *world) execute(a fsm.Action, tasks int) fsm.Result {
	if a.Kind == fsm.ActRemoveImage {
		i := index(a.Container[len("sha256:"):])
		for _, c := range w.tasks[i].ctrs {
			if c.exists { // as Docker and Podman do: a container, running or not, holds its image
				return fsm.Result{Kind: fsm.Refused, Err: "image in use by a container"}
			}
		}
		w.tasks[i].image = 2
		if t := &w.tasks[i]; t.delivered && !t.cleanedByAgent(w.nCtrs) {
			w.fail("IMAGE OF A LIVE TASK REMOVED: %s, which task %s (not cleaned) uses", a.Container, arn(i))
		}
		return fsm.Result{Kind: fsm.Succeeded}
	}
	t, c := w.container(a)
	i, j := index(a.Task), index(a.Container)
	id := runtimeID(i, j, c.inc)
	if a.RuntimeID != "" && a.RuntimeID != id {
		return fsm.Result{Kind: fsm.Vanished, Err: "no such container"} // an older incarnation
	}
	switch a.Kind {
	case fsm.ActPull:
		t.image = 1
		return fsm.Result{Kind: fsm.Succeeded, ImageID: imageID(i), ImagePulled: true}
	case fsm.ActCreate:
		if t.image == 2 {
			return fsm.Result{Kind: fsm.Failed, Err: "no such image"} // a dead agent's create, landing after its task's image went
		}
		if !c.exists { // create is idempotent by task and container
			// The agent making again a container its fence removed makes one not removed; a
			// dead agent's create landing after the cleanup leaves the task cleaned.
			again := c.fenced && a.From == event.StatusCreated
			c.inc++
			*c = ctrWorld{settled: c.settled, inc: c.inc, exists: true, starts: c.starts, lost: c.lost, removed: c.removed && !again}
		}
		return fsm.Result{Kind: fsm.Succeeded, RuntimeID: runtimeID(i, j, c.inc)}
	}
	if a.Kind == fsm.ActRemove {
		if t.settled != event.StatusStopped && c.exists {
			w.fail("REMOVED BEFORE SETTLED: container %s/%s removed while the control plane has task %s as %s", a.Task, a.Container, a.Task, orNone(t.settled))
		}
		c.exists, c.running, c.removed, c.fenced = false, false, true, false
		return fsm.Result{Kind: fsm.Succeeded}
	}
	if !c.exists {
		return fsm.Result{Kind: fsm.Vanished, Err: "no such container"}
	}
	switch a.Kind {
	case fsm.ActFence: // refused for one that started: it runs, or ran and exited
		if c.started {
			r := fsm.Result{Kind: fsm.Succeeded}
			r.Saw(c.observed(id))
			return r
		}
		c.exists, c.removed, c.fenced = false, true, true
		return fsm.Result{Kind: fsm.Succeeded}
	case fsm.ActStart:
		running, err := runtime.CheckStart(c.runtimeState(id))
		switch {
		case err != nil:
			return fsm.Result{Kind: fsm.Unknown, Err: err.Error()}
		case running:
			return fsm.Result{Kind: fsm.Succeeded}
		}
		c.started, c.running = true, true
		c.starts++
		if c.starts > 1 {
			w.fail("RUN TWICE: container %s/%s was started %d times", a.Task, a.Container, c.starts)
		}
		return fsm.Result{Kind: fsm.Succeeded}
	case fsm.ActStop:
		if c.running {
			c.running, c.exit = false, 143
		}
		r := fsm.Result{Kind: fsm.Succeeded}
		r.Saw(c.observed(id))
		return r
	case fsm.ActInspect:
		r := fsm.Result{Kind: fsm.Succeeded}
		r.Saw(c.observed(id))
		return r
	}
	return fsm.Result{Kind: fsm.Failed, Err: "unknown call"}
}

// cleanedByAgent: the agent asked the runtime to remove every container of the task.
func (t *taskWorld) cleanedByAgent(ctrs int) bool {
	for _, c := range t.ctrs[:ctrs] {
		if !c.removed {
			return false
		}
	}
	return true
}

func (c *ctrWorld) observed(id string) fsm.Observed {
	return fsm.Observed{ID: id, Running: c.running, Exited: c.started && !c.running, ExitCode: c.exit}
}

func orNone(s event.Status) string {
	if s == "" {
		return "nothing settled"
	}
	return string(s)
}

// settle is the control plane accepting a report's changes: the world's record of them, and
// the checks a change accepted must pass against what the runtime did.
func (w *world) settle(changes []protocol.StateChange) {
	for _, ch := range changes {
		if ch.Status == "" {
			continue
		}
		t := &w.tasks[index(ch.TaskARN)]
		st := event.Status(ch.Status)
		if ch.Container == "" {
			t.settled = st
			continue
		}
		c := &t.ctrs[index(ch.Container)]
		c.settled = st
		if st == event.StatusRunning && c.starts == 0 {
			w.fail("SENT AHEAD OF KNOWN: %s/%s reported RUNNING, never started by the runtime", ch.TaskARN, ch.Container)
		}
	}
}

// observe is what the runtime lists after a restart, with the containers the projection
// knows by id that it lacks (Gone), as the engine's reconcile asks it.
func (w *world) observe(st *fsm.State, tasks, ctrs int) fsm.RuntimeObserved {
	var out fsm.RuntimeObserved
	for i := range tasks {
		for j := range ctrs {
			c := &w.tasks[i].ctrs[j]
			id := runtimeID(i, j, c.inc)
			if c.exists {
				o := c.observed(id)
				o.Task, o.Container = arn(i), ctrName(j)
				out.Containers = append(out.Containers, o)
				continue
			}
			if t := st.Tasks[arn(i)]; t != nil {
				if k := t.Container(ctrName(j)); k != nil && k.RuntimeID != "" {
					out.Containers = append(out.Containers, fsm.Observed{ID: k.RuntimeID, Task: arn(i), Container: ctrName(j), Gone: true})
				}
			}
		}
	}
	return out
}
