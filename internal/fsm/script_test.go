package fsm_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// harness plays a script: records are appended to a history and applied; `run` plays the
// engine's part with a runtime where every action succeeds unless told otherwise.
type harness struct {
	st      *fsm.State
	seq     uint64
	now     time.Time
	cfg     fsm.Config
	history []event.Record
	// registry: pulls answer with an image id and digest, as a registry-backed runtime
	// does; an image under local/ was present already (not pulled by the agent).
	registry bool
	pushes   map[string]int   // re-pushes of a reference: each resolves it to a new image
	queue    fsm.RemovalQueue // tasks waiting for a removal slot, as the engine queues them
	gone     map[uint64]bool  // records a compact-plan dropped (the history keeps them)
}

// TestScripts runs the scripts in testdata/. Rewrite expectations with -rewrite.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{st: fsm.New(), now: t0, cfg: fsm.Config{CleanupWait: 3 * time.Hour}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.do(t, d)
		})
	})
}

func (h *harness) record(task, container string, e event.Event) string {
	rec := event.Record{Seq: h.seq + 1, Time: h.now, Task: task, Container: container, Event: e}
	if err := h.st.Apply(rec); err != nil {
		return "error: " + err.Error() + "\n"
	}
	h.seq++
	h.history = append(h.history, rec)
	return line(rec)
}

func line(rec event.Record) string {
	subj := rec.Task
	if rec.Container != "" {
		subj += "/" + rec.Container
	}
	return strings.TrimRight(fmt.Sprintf("#%d %s %s %s", rec.Seq, rec.Type(), subj, event.Describe(rec.Event)), " ") + "\n"
}

func str(t *testing.T, d *datadriven.TestData, key string) string {
	var v string
	d.MaybeScanArgs(t, key, &v)
	return v
}

func seqIDs(t *testing.T, d *datadriven.TestData, st *fsm.State, key string) []string {
	arg, ok := d.Arg(key)
	if !ok {
		return nil
	}
	var out []string
	for _, v := range arg.Vals {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			d.Fatalf(t, "%s: %q is not a sequence number", key, v)
		}
		out = append(out, st.ChangeID(n))
	}
	return out
}

func (h *harness) do(t *testing.T, d *datadriven.TestData) string {
	task, ctr := str(t, d, "task"), str(t, d, "name")
	reason := strings.TrimSpace(d.Input)
	switch d.Cmd {
	case "config":
		var w string
		d.ScanArgs(t, "wait", &w)
		dur, err := time.ParseDuration(w)
		if err != nil {
			d.Fatalf(t, "wait: %v", err)
		}
		h.cfg.CleanupWait = dur
		return "ok\n"
	case "tick":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "tick: %v", err)
		}
		h.now = h.now.Add(dur)
		return fmt.Sprintf("now %s\n", h.now.Format(time.TimeOnly))
	case "agent":
		return h.record("", "", &event.AgentStarted{AgentID: str(t, d, "id"), JournalID: str(t, d, "journal"), Version: "test"})
	case "payload":
		return h.record("", "", &event.PayloadReceived{MessageID: str(t, d, "id")})
	case "add":
		desired := event.Status(str(t, d, "desired"))
		if desired == "" {
			desired = event.StatusRunning
		}
		e := &event.TaskAdded{MessageID: str(t, d, "msg"), Family: "web", Desired: desired}
		for _, l := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			spec := event.ContainerSpec{Name: f[0]}
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "image":
					spec.Image = v
				case "essential":
					spec.Essential = true
				case "cmd":
					spec.Command = strings.Split(v, ",")
				case "health-check":
					spec.HealthCheck = &event.HealthCheck{Command: []string{"CMD", v}}
				case "depends": // depends=db:HEALTHY,init:COMPLETE
					for _, dc := range strings.Split(v, ",") {
						ctr, cond, _ := strings.Cut(dc, ":")
						spec.DependsOn = append(spec.DependsOn, event.Dependency{Container: ctr, Condition: cond})
					}
				case "start-timeout":
					n, err := strconv.Atoi(v)
					if err != nil {
						d.Fatalf(t, "start-timeout: %v", err)
					}
					spec.StartTimeoutS = &n
				}
			}
			e.Containers = append(e.Containers, spec)
		}
		return h.record(task, "", e)
	case "reject":
		return h.record(task, "", &event.TaskRejected{Reason: reason})
	case "health":
		return h.record(task, ctr, &event.HealthChanged{Health: event.Health(str(t, d, "health"))})
	case "resend": // resend task=T [msg=M desired=S]
		return h.record(task, "", &event.TaskResent{MessageID: str(t, d, "msg"), Desired: event.Status(str(t, d, "desired"))})
	case "desire":
		return h.record(task, "", &event.DesiredChanged{MessageID: str(t, d, "msg"), To: event.Status(str(t, d, "to"))})
	case "ctr":
		e := &event.ContainerTransitioned{From: event.Status(str(t, d, "from")), To: event.Status(str(t, d, "to")), Reason: reason, RuntimeID: str(t, d, "id")}
		if d.HasArg("exit") {
			var code int
			d.ScanArgs(t, "exit", &code)
			e.ExitCode = &code
		}
		return h.record(task, ctr, e)
	case "task":
		return h.record(task, "", &event.TaskTransitioned{From: event.Status(str(t, d, "from")), To: event.Status(str(t, d, "to")), Reason: reason})
	case "settle":
		e := &event.ChangesSettled{Accepted: seqIDs(t, d, h.st, "accept")}
		if d.HasArg("pending") { // what the submitter would send now, all accepted
			for _, c := range h.st.Pending(100) {
				e.Accepted = append(e.Accepted, c.ID)
			}
		}
		for _, id := range seqIDs(t, d, h.st, "reject") {
			e.Rejected = append(e.Rejected, event.Rejection{ID: id, Error: "unknown_task"})
		}
		return h.record("", "", e)
	case "acked":
		return h.record(task, "", &event.StoppedAcked{ChangeID: str(t, d, "change")})
	case "cleanup":
		return h.record(task, "", &event.CleanupStarted{})
	case "registry":
		h.registry = true
		return "ok\n"
	case "push": // push ref=R: the tag is re-pushed; the next pull of it fetches a new image
		if h.pushes == nil {
			h.pushes = map[string]int{}
		}
		h.pushes[str(t, d, "ref")]++
		return "ok\n"
	case "collect":
		return h.collect(t, d)
	case "remove-image":
		return h.record("", "", &event.ImageRemoved{ImageID: str(t, d, "id")})
	case "removed":
		return h.record(task, ctr, &event.ContainerRemoved{})
	case "cleaned":
		return h.record(task, "", &event.TaskCleaned{})
	case "compact":
		arg, _ := d.Arg("tasks")
		return h.record("", "", &event.CompactionDone{Tasks: arg.Vals})
	case "refused": // refused task=T msg=M record=TYPE [desired=S]: the stand-in of a refused payload record
		return h.record(task, ctr, &event.RecordRefused{MessageID: str(t, d, "msg"), Record: str(t, d, "record"), Reason: reason, Desired: event.Status(str(t, d, "desired"))})
	case "reoffer": // a restart offers the refused desired changes again
		var b strings.Builder
		for _, r := range h.st.Step(h.now, fsm.Reoffered{}).Records {
			b.WriteString(h.record(r.Task, r.Container, r.Event))
		}
		if b.Len() == 0 {
			return "nothing\n"
		}
		return b.String()
	case "compact-plan":
		return h.compactPlan(t, d)
	case "decide":
		return formatDecisions(h.st.Decide(h.now, h.cfg))
	case "queue":
		return h.removalQueue(t, d)
	case "run":
		return h.run(t, d)
	case "pending":
		max := 100
		d.MaybeScanArgs(t, "max", &max)
		var b strings.Builder
		for _, c := range h.st.Pending(max) {
			b.WriteString(c.String() + "\n")
		}
		if b.Len() == 0 {
			return "nothing to send\n"
		}
		return b.String()
	case "state":
		h.checkReplay(t)
		return h.st.Format(h.now, h.cfg)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func formatDecisions(dec fsm.Decisions) string {
	var b strings.Builder
	for _, r := range dec.Records {
		fmt.Fprintf(&b, "journal %s", strings.TrimPrefix(line(r), "#0 "))
	}
	for _, a := range dec.Actions {
		fmt.Fprintf(&b, "act %s %s/%s\n", a.Kind, a.Task, a.Container)
	}
	for _, w := range dec.Wakes {
		fmt.Fprintf(&b, "wake %s at %s\n", w.Task, w.At.Format(time.TimeOnly))
	}
	if b.Len() == 0 {
		return "nothing\n"
	}
	return b.String()
}

// run plays the engine until nothing more happens by itself: it journals what Decide asks,
// and carries out every runtime action successfully — except those named by fail=(name:kind)
// — turning each outcome into records with the projection's own mapping (Step), as the
// engine does.
func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	fail := map[string]bool{}
	if arg, ok := d.Arg("fail"); ok {
		for _, v := range arg.Vals {
			fail[v] = true
		}
	}
	var b strings.Builder
	for i := 0; i < 200; i++ {
		dec := h.st.Decide(h.now, h.cfg)
		for _, r := range dec.Records {
			b.WriteString(h.record(r.Task, r.Container, r.Event))
		}
		if len(dec.Records) > 0 {
			continue // decisions after records see the new state
		}
		if len(dec.Actions) == 0 {
			if b.Len() == 0 {
				return "nothing\n"
			}
			return b.String()
		}
		for _, a := range dec.Actions {
			for _, r := range a.Intent() {
				b.WriteString(h.record(r.Task, r.Container, r.Event))
			}
			res := succeed(a)
			if a.Kind == fsm.ActPull && h.registry {
				res.ImageID, res.ImageDigest = imageOf(a.Spec.Image)
				if n := h.pushes[a.Spec.Image]; n > 0 {
					res.ImageID, res.ImageDigest = fmt.Sprintf("%s-v%d", res.ImageID, n+1), fmt.Sprintf("%s-v%d", res.ImageDigest, n+1)
				}
				res.ImagePulled = !strings.HasPrefix(a.Spec.Image, "local/")
			}
			if fail[a.Container+":"+string(a.Kind)] {
				res = fsm.Result{Kind: fsm.Failed, Err: "injected"}
			}
			for _, r := range h.st.Step(h.now, fsm.ActionFinished{Action: a, Result: res}).Records {
				b.WriteString(h.record(r.Task, r.Container, r.Event))
			}
		}
	}
	d.Fatalf(t, "run did not settle in 200 rounds:\n%s", b.String())
	return ""
}

// removalQueue plays the engine's removal slot queue: `queue wait=t1,t2` queues tasks for a
// slot; `queue next out=remove:t1/app backoff=… quarantined=t2` frees one, with those calls out
// and backing off, and names the task the core hands it to.
func (h *harness) removalQueue(t *testing.T, d *datadriven.TestData) string {
	keys := func(name string) map[fsm.ActionKey]bool {
		out := map[fsm.ActionKey]bool{}
		arg, _ := d.Arg(name)
		for _, v := range arg.Vals {
			kind, rest, _ := strings.Cut(v, ":")
			task, ctr, _ := strings.Cut(rest, "/")
			out[fsm.ActionKey{Kind: fsm.ActionKind(kind), Task: task, Container: ctr}] = true
		}
		return out
	}
	var b strings.Builder
	if arg, ok := d.Arg("wait"); ok {
		for _, arn := range arg.Vals {
			h.queue.Wait(arn)
		}
	}
	if d.HasArg("next") {
		view := fsm.NewInFlight(0)
		for k := range keys("out") {
			view.Add(k)
		}
		view.Backoff, view.Quarantined = keys("backoff"), map[string]string{}
		arg, _ := d.Arg("quarantined")
		for _, arn := range arg.Vals {
			view.Quarantined[arn] = "refused record"
		}
		next := h.queue.Next(h.st, h.now, h.cfg, view)
		if next == "" {
			next = "none"
		}
		fmt.Fprintf(&b, "slot to %s\n", next)
	}
	fmt.Fprintf(&b, "%d waiting\n", h.queue.Len())
	return b.String()
}

// imageOf is the id and digest the script's registry resolves a reference to: stable, and
// shared by references that differ only in tag.
func imageOf(ref string) (id, digest string) {
	name, _, _ := strings.Cut(ref, ":")
	name = strings.NewReplacer("/", "-", "@", "-").Replace(name)
	return "sha256:i-" + name, "sha256:d-" + name
}

// collect decides image removals (collect age=D per=N [low]) and carries them out, each
// succeeding unless gone=(id) says the runtime no longer has it.
func (h *harness) collect(t *testing.T, d *datadriven.TestData) string {
	var age string
	cfg := fsm.ImageConfig{PerCycle: 5}
	d.ScanArgs(t, "age", &age)
	d.MaybeScanArgs(t, "per", &cfg.PerCycle)
	var err error
	if cfg.MinAge, err = time.ParseDuration(age); err != nil {
		d.Fatalf(t, "age: %v", err)
	}
	gone := map[string]bool{}
	if arg, ok := d.Arg("gone"); ok {
		for _, v := range arg.Vals {
			gone[v] = true
		}
	}
	var b strings.Builder
	for _, a := range h.st.CollectImages(h.now, cfg, d.HasArg("low")) {
		res := fsm.Result{Kind: fsm.Succeeded}
		if gone[a.RuntimeID] {
			res.Kind = fsm.Vanished
		}
		for _, r := range h.st.Step(h.now, fsm.ActionFinished{Action: a, Result: res}).Records {
			b.WriteString(h.record(r.Task, r.Container, r.Event))
		}
	}
	if b.Len() == 0 {
		return "nothing\n"
	}
	return b.String()
}

// succeed is what a runtime where every call works answers: a stop ends the container with
// 143, as a SIGTERM does.
func succeed(a fsm.Action) fsm.Result {
	switch a.Kind {
	case fsm.ActCreate:
		return fsm.Result{Kind: fsm.Succeeded, RuntimeID: "sim-" + a.Container}
	case fsm.ActStop:
		return fsm.Result{Kind: fsm.Succeeded, Exited: true, ExitCode: 143}
	}
	return fsm.Result{Kind: fsm.Succeeded}
}

// checkReplay proves, at every `state`, that replaying the history from scratch and from a
// snapshot taken at each point rebuilds the very same projection, byte for byte.
func (h *harness) checkReplay(t *testing.T) {
	t.Helper()
	want, err := h.st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	full := fsm.New()
	for _, r := range h.history {
		if err := full.Apply(r); err != nil {
			t.Fatalf("replay: %v", err)
		}
	}
	if got, _ := full.Snapshot(); !bytes.Equal(got, want) {
		t.Fatalf("full replay differs from the live projection:\nlive   %s\nreplay %s", want, got)
	}
	for cut := 0; cut <= len(h.history); cut++ {
		part := fsm.New()
		for _, r := range h.history[:cut] {
			_ = part.Apply(r)
		}
		snap, _ := part.Snapshot()
		restored, err := fsm.Restore(snap)
		if err != nil {
			t.Fatalf("restore at %d: %v", cut, err)
		}
		for _, r := range h.history[cut:] {
			if err := restored.Apply(r); err != nil {
				t.Fatalf("tail replay after snapshot at %d: %v", cut, err)
			}
		}
		if got, _ := restored.Snapshot(); !bytes.Equal(got, want) {
			t.Fatalf("snapshot at %d + tail differs from full replay", cut)
		}
	}
}

// compactPlan plans a compaction as the engine does (compact-plan retention=D upto=N: the
// snapshot at N the only one kept), names the records it drops that no compaction before it
// did and journals its compaction_done. The history keeps them, so that every later `state`
// still proves a full replay equal to snapshot + tail (payloads that hold live tasks go by
// age while their ids stay: a compacted journal replays only from its snapshot).
func (h *harness) compactPlan(t *testing.T, d *datadriven.TestData) string {
	var ret string
	var upTo uint64
	d.ScanArgs(t, "retention", &ret)
	d.ScanArgs(t, "upto", &upTo)
	retention, err := time.ParseDuration(ret)
	if err != nil {
		d.Fatalf(t, "retention: %v", err)
	}
	f := fsm.JournalFacts{Snapshots: []uint64{upTo}, Newest: upTo}
	for _, r := range h.history {
		if !r.Time.After(h.now.Add(-retention)) {
			f.HorizonSeq = r.Seq
		}
	}
	p := h.st.PlanCompaction(h.now, fsm.CompactionPolicy{Retention: retention}, f)
	var b strings.Builder
	fmt.Fprintf(&b, "plan: cut=%d tasks=%v messages=%v refused-up-to=%d\n", p.Cut, p.Tasks, p.Messages, p.RefusedUpTo)
	var dropped []string
	for _, r := range h.history {
		if r.Seq <= p.UpTo && !h.gone[r.Seq] && p.Drops(r.Task, r.Type(), r.Seq) {
			dropped = append(dropped, fmt.Sprintf("#%d", r.Seq))
			if h.gone == nil {
				h.gone = map[uint64]bool{}
			}
			h.gone[r.Seq] = true
		}
	}
	fmt.Fprintf(&b, "dropped %s\n", strings.Join(dropped, " "))
	b.WriteString(h.record("", "", p.Done(len(dropped))))
	return b.String()
}
