package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/registrytest"
	"github.com/agentd/agentd/internal/testrig"
)

// removeImagesAtEnd removes, when the test ends (after its containers: cleanups run last in,
// first out), every image the test made the engine hold.
func removeImagesAtEnd(t *testing.T) *[]string {
	var refs []string
	t.Cleanup(func() {
		for _, r := range refs {
			_ = exec.Command("docker", "image", "rm", "-f", r).Run()
		}
	})
	return &refs
}

func imagePresent(ref string) bool {
	return exec.Command("docker", "image", "inspect", ref).Run() == nil
}

// TestDockerPrivateRegistriesThroughTheAgent: the agent pulls from a registry that wants
// credentials with those of its --registry-auth-file and runs the task; a task whose registry
// it has no credentials for stops at once, its reason naming the image and "unauthorized";
// the digest each container actually got is shown by /v1/tasks/{arn}: `always` picks up a
// re-pushed tag, `if-not-present` keeps what the host has; and the credentials appear nowhere
// — not in the journal, any API answer, the settings printout or the agent's log.
func TestDockerPrivateRegistriesThroughTheAgent(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	const user, pass = "agentd-ci", "pa55-7f3a-registry-secret"
	images := removeImagesAtEnd(t)
	private, stranger := registrytest.New(t), registrytest.New(t)
	private.RequireAuth(user, pass)
	stranger.RequireAuth("someone", "else-entirely")
	ref, d1 := private.Push(t, "app:1", registrytest.Testbox(t, "v1"))
	otherRef, _ := stranger.Push(t, "app:1", registrytest.Testbox(t, "stranger"))
	a := startRegistryAgent(t, private.AuthFile(user, pass))

	a.assign("task/img-a", ref, "")
	a.assign("task/img-b", otherRef, "")
	got := a.await(map[string]string{"task/img-a": "RUNNING", "task/img-b": "STOPPED"})
	if r := got["task/img-b"].Reason; !strings.Contains(r, "unauthorized") || !strings.Contains(r, otherRef) {
		t.Fatalf("task/img-b stopped with reason %q: it must name the image and say unauthorized", r)
	}
	t.Logf("task/img-b stopped: %s", got["task/img-b"].Reason)
	if n := stranger.Count("GET /v2/ "); n > 2 {
		t.Fatalf("the refused pull was tried %d times: unauthorized is not worth a retry\n%s", n, strings.Join(stranger.Requests(), "\n"))
	}
	idA, gotA := a.digest("task/img-a")
	*images = append(*images, ref, idA)
	if gotA != d1 {
		t.Fatalf("task/img-a shows image digest %q; the registry served %s", gotA, d1)
	}

	// A new build under the same tag: if-not-present keeps what the host has, always gets it.
	_, d2 := private.Push(t, "app:1", registrytest.Testbox(t, "v2"))
	a.assign("task/img-cached", ref, "if-not-present")
	a.await(map[string]string{"task/img-cached": "RUNNING"})
	a.assign("task/img-always", ref, "always")
	a.await(map[string]string{"task/img-always": "RUNNING"})
	_, gotCached := a.digest("task/img-cached")
	idAlways, gotAlways := a.digest("task/img-always")
	*images = append(*images, idAlways)
	if gotCached != d1 {
		t.Fatalf("pull_policy if-not-present ran digest %q after the re-push; the host held %s", gotCached, d1)
	}
	if gotAlways != d2 || d2 == d1 {
		t.Fatalf("pull_policy always ran digest %q after the re-push of %s (old %s)", gotAlways, d2, d1)
	}

	// The secrets, as a leak would show them: plain, or as the auth file and the Docker API
	// header carry them.
	secrets := []string{pass, base64.StdEncoding.EncodeToString([]byte(user + ":" + pass)),
		base64.URLEncoding.EncodeToString([]byte(user + ":" + pass)), base64.StdEncoding.EncodeToString([]byte(pass))}
	said := a.stopAndRead()
	for where, text := range said {
		for _, s := range secrets {
			if bytes.Contains(text, []byte(s)) {
				t.Errorf("the registry credentials (%q) appear in %s", s, where)
			}
		}
	}
	if !bytes.Contains(said["the journal file"], []byte(d1)) {
		t.Error("the journal does not hold the digest the agent pulled (it must, with the container)")
	}
	noViolations(t, a.cpURL)
}

// registryAgent is an agent on the Docker Engine pulling with a --registry-auth-file, and its
// control plane, each its own process.
type registryAgent struct {
	t                                      *testing.T
	agent                                  *proc
	agentID, cpURL, api, dataDir, authFile string
}

func startRegistryAgent(t *testing.T, authConfig string) *registryAgent {
	a := &registryAgent{t: t, dataDir: filepath.Join(t.TempDir(), "data"), authFile: filepath.Join(t.TempDir(), "config.json")}
	if err := os.WriteFile(a.authFile, []byte(authConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	a.agentID = strings.ReplaceAll("agent-img-"+time.Now().Format("150405.000"), ".", "")
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + a.agentID) })
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	a.cpURL = "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	a.agent = startProc(t, "run", "--runtime", "docker", "--data-dir", a.dataDir, "--backend", a.cpURL,
		"--listen", "127.0.0.1:0", "--cleanup-wait", "10m", "--log-format", "json", "--log-level", "debug",
		"--agent-id", a.agentID, "--registry-auth-file", a.authFile)
	a.api = "http://" + a.agent.await(t, "agent running", 60*time.Second)["listen"].(string)
	return a
}

// assign gives the agent a task of one container running image, under pull_policy policy.
func (a *registryAgent) assign(arn, image, policy string) {
	c := map[string]any{"name": "app", "image": image, "command": []string{"run"}}
	if policy != "" {
		c["pull_policy"] = policy
	}
	postJSON(a.t, a.cpURL+"/v1/tasks", map[string]any{"agent": a.agentID, "task": map[string]any{"arn": arn, "containers": []map[string]any{c}}})
}

// await waits (90 s at most) until the control plane knows each task in the status wanted.
func (a *registryAgent) await(want map[string]string) map[string]cpWorkload {
	a.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got, all := map[string]cpWorkload{}, true
		for arn, status := range want {
			var w cpWorkload
			getJSON(a.t, a.cpURL+"/v1/tasks/"+arn, &w)
			got[arn], all = w, all && w.Status == status
		}
		if all {
			return got
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("want %v: not within 90 s: %+v\n%s", want, got, a.agent.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// digest is the image id and digest the agent's API shows for the task's one container.
func (a *registryAgent) digest(arn string) (id, digest string) {
	a.t.Helper()
	var v struct {
		Containers []struct {
			ImageID     string `json:"image_id"`
			ImageDigest string `json:"image_digest"`
		} `json:"containers"`
	}
	if code := getJSON(a.t, a.api+"/v1/tasks/"+arn, &v); code != 200 || len(v.Containers) != 1 {
		a.t.Fatalf("GET /v1/tasks/%s: %d %+v", arn, code, v)
	}
	return v.Containers[0].ImageID, v.Containers[0].ImageDigest
}

// stopAndRead is everything the agent said, by where: its API's answers, its settings
// printout, then — stopped — its log and its journal file.
func (a *registryAgent) stopAndRead() map[string][]byte {
	var answers bytes.Buffer
	for _, path := range []string{"/v1/tasks", "/v1/tasks/task/img-a", "/v1/tasks/task/img-b", "/v1/metadata", "/metrics", "/healthz", "/", "/v1/journal/export"} {
		resp, err := ownClient.Get(a.api + path)
		if err != nil {
			a.t.Fatal(err)
		}
		_, _ = io.Copy(&answers, resp.Body)
		resp.Body.Close()
	}
	printed, _ := exec.Command(agentdBinary(a.t), "run", "--print-config", "--backend", a.cpURL, "--registry-auth-file", a.authFile).CombinedOutput()
	_ = a.agent.cmd.Process.Signal(syscall.SIGTERM)
	_ = a.agent.cmd.Wait()
	journalBytes, err := os.ReadFile(filepath.Join(a.dataDir, journal.FileName))
	if err != nil {
		a.t.Fatal(err)
	}
	return map[string][]byte{"the journal file": journalBytes, "an API answer": answers.Bytes(), "the agent's log": []byte(a.agent.log()), "--print-config": printed}
}

// TestDockerImageCollectionOnAFakeClock: on the Docker Engine, driven on a virtual clock,
// image collection removes an image the agent pulled only once no task that is not cleaned
// uses it and it went unused for the age; an image of a live task stays, and so does an image
// the agent did not pull (the host's), however long it goes unused. Each removal is journaled
// and counted.
func TestDockerImageCollectionOnAFakeClock(t *testing.T) {
	images := removeImagesAtEnd(t)
	r := newGCRig(t, "agent-gc")
	reg := registrytest.New(t)
	liveRef, _ := reg.Push(t, "live:1", registrytest.Testbox(t, "live"))
	oldRef, _ := reg.Push(t, "old:1", registrytest.Testbox(t, "old"))
	hostRef := fmt.Sprintf("agentd-host-image-%d:1", time.Now().UnixNano())
	if out, err := exec.Command("docker", "tag", "agentd-testbox:latest", hostRef).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v: %s", err, out)
	}
	*images = append(*images, liveRef, oldRef, hostRef)

	live, old, host := gcTask("task/gc-live", liveRef), gcTask("task/gc-old", oldRef), gcTask("task/gc-host", hostRef)
	r.send("RUNNING", live, old, host)
	r.allRunning(live, old, host)

	// Two days pass with everything running: nothing a live task uses goes.
	r.advance(48 * time.Hour)
	if got := r.removed(); len(got) > 0 || !imagePresent(liveRef) || !imagePresent(oldRef) || !imagePresent(hostRef) {
		t.Fatalf("removed %v while every image was in use", got)
	}
	// old and host stop and are cleaned; old's image is the agent's, unused from then on.
	r.send("STOPPED", old, host)
	r.advance(2 * time.Minute)
	if _, ok := r.e.State().Tombstones[old.ARN]; !ok {
		t.Fatalf("task/gc-old is not cleaned: %+v", r.e.State().Tasks[old.ARN])
	}
	r.advance(50 * time.Minute)
	if got := r.removed(); len(got) > 0 || !imagePresent(oldRef) {
		t.Fatalf("removed %v before the image went unused for an hour", got)
	}
	r.advance(20 * time.Minute)
	if got := r.removed(); len(got) != 1 || got[0] != oldRef || imagePresent(oldRef) {
		t.Fatalf("after an hour unused: removed %v (want only %s), still present: %v", got, oldRef, imagePresent(oldRef))
	}
	if !imagePresent(liveRef) || !imagePresent(hostRef) {
		t.Fatal("collection removed the live task's image or the host's")
	}
	// The host's image is never the agent's to remove, however long it goes unused.
	r.advance(72 * time.Hour)
	if got := r.removed(); len(got) != 1 || !imagePresent(hostRef) || !imagePresent(liveRef) {
		t.Fatalf("after three more days: removed %v; host image present %v, live image present %v", got, imagePresent(hostRef), imagePresent(liveRef))
	}
	if n := metricValue(t, r.e, "agentd_images_removed_total"); n != 1 {
		t.Fatalf("agentd_images_removed_total = %v, want 1", n)
	}
}

// TestDockerImageCollectionLeavesWhatTheHostNames (issue 22): an operator pulled
// REG/app@sha256:…; a task names REG/app:tag, the same image. The image was the host's before
// the agent's pull, so it is never the agent's: it survives collection, however long unused
// (before, the absent reference made it the agent's, and collection removed it). And an image
// the agent did pull, which the operator then tagged for their own use: collection takes back
// the agent's tag only, the engine keeps the image under the operator's, and the agent's claim
// ends — journaled image_released once, never tried again hour after hour, and no removal
// failure counted for the alert.
func TestDockerImageCollectionLeavesWhatTheHostNames(t *testing.T) {
	images := removeImagesAtEnd(t)
	r := newGCRig(t, "agent-gc-host")
	reg := registrytest.New(t)
	taskRef, digest := reg.Push(t, "app:task", registrytest.Testbox(t, "pinned"))
	pinned := reg.Addr + "/app@" + digest
	ownRef, _ := reg.Push(t, "own:1", registrytest.Testbox(t, "own"))
	opsTag := fmt.Sprintf("agentd-ops-keep-%d:1", time.Now().UnixNano())
	*images = append(*images, taskRef, pinned, ownRef, opsTag)
	if out, err := exec.Command("docker", "pull", pinned).CombinedOutput(); err != nil {
		t.Fatalf("the operator's docker pull %s: %v: %s", pinned, err, out)
	}

	pinnedTask, ownTask := gcTask("task/gc-pinned", taskRef), gcTask("task/gc-own", ownRef)
	r.send("RUNNING", pinnedTask, ownTask)
	r.allRunning(pinnedTask, ownTask)
	st := r.e.State()
	pinnedID, ownID := st.Tasks[pinnedTask.ARN].Containers[0].ImageID, st.Tasks[ownTask.ARN].Containers[0].ImageID
	*images = append(*images, pinnedID, ownID)
	if st.Images[pinnedID] != nil || st.Images[ownID] == nil {
		t.Fatalf("the agent's images: %v; want %s (pulled by it) and not %s (the host's, by digest)", st.Images, ownID, pinnedID)
	}
	if out, err := exec.Command("docker", "tag", ownRef, opsTag).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v: %s", err, out)
	}
	r.send("STOPPED", pinnedTask, ownTask)
	r.advance(72 * time.Hour)
	if got := r.removed(); len(got) > 0 {
		t.Fatalf("removed %v; neither image may go", got)
	}
	if !imagePresent(pinned) || !imagePresent(opsTag) {
		t.Fatalf("the host's images after three days: %s present %v, %s present %v", pinned, imagePresent(pinned), opsTag, imagePresent(opsTag))
	}
	rel := r.released()
	if len(rel) != 1 || rel[0].ImageID != ownID || !strings.Contains(rel[0].Reason, opsTag) {
		t.Fatalf("image_released records %+v; want one, of %s, naming %s", rel, ownID, opsTag)
	}
	if imagePresent(ownRef) {
		t.Fatalf("the agent's own tag %s is still there: collection takes it back", ownRef)
	}
	if n := metricValue(t, r.e, "agentd_image_removal_failures_total"); n != 0 {
		t.Fatalf("agentd_image_removal_failures_total = %v: a release is no failure, and is not tried again", n)
	}
	if n := metricValue(t, r.e, "agentd_images_released_total"); n != 1 {
		t.Fatalf("agentd_images_released_total = %v, want 1", n)
	}
	if len(r.e.State().Images) != 0 {
		t.Fatalf("the agent still claims %v", r.e.State().Images)
	}
}

// TestDockerImageCollectionLeavesWhatOthersClaimedSince (issue 41): the agent pulls an image
// (it is the agent's: the host did not have it), and then someone else claims it in a way the
// image list does not show — an operator pulls it by digest (the agent's pull recorded that
// digest already; untagging the agent's last tag would drop it), or pulls the agent's own tag
// again. Once the tasks are cleaned and unused for the age, collection leaves both images
// and their references in place, journals each image_released naming whose pull kept it, and
// counts no removal failure. An image nobody else touched is still removed beside them.
func TestDockerImageCollectionLeavesWhatOthersClaimedSince(t *testing.T) {
	images := removeImagesAtEnd(t)
	r := newGCRig(t, "agent-gc-claims")
	reg := registrytest.New(t)
	pinRef, pinDigest := reg.Push(t, "pinned:1", registrytest.Testbox(t, "pinned-later"))
	pinned := reg.Addr + "/pinned@" + pinDigest
	repullRef, _ := reg.Push(t, "repulled:1", registrytest.Testbox(t, "repulled-later"))
	aloneRef, _ := reg.Push(t, "alone:1", registrytest.Testbox(t, "untouched"))
	*images = append(*images, pinRef, pinned, repullRef, aloneRef)

	pin, repull, alone := gcTask("task/gc-pin", pinRef), gcTask("task/gc-repull", repullRef), gcTask("task/gc-alone", aloneRef)
	r.send("RUNNING", pin, repull, alone)
	r.allRunning(pin, repull, alone)
	st := r.e.State()
	for _, task := range []protocol.Task{pin, repull, alone} {
		id := st.Tasks[task.ARN].Containers[0].ImageID
		*images = append(*images, id)
		if st.Images[id] == nil {
			t.Fatalf("%s's image %s is not the agent's: %v (the agent's pull fetched it)", task.ARN, id, st.Images)
		}
	}
	pinID, repullID := st.Tasks[pin.ARN].Containers[0].ImageID, st.Tasks[repull.ARN].Containers[0].ImageID
	for _, ref := range []string{pinned, repullRef} {
		if out, err := exec.Command("docker", "pull", ref).CombinedOutput(); err != nil {
			t.Fatalf("the operator's docker pull %s: %v: %s", ref, err, out)
		}
	}

	r.send("STOPPED", pin, repull, alone)
	r.advance(3 * time.Hour)
	if got := r.removed(); len(got) != 1 || got[0] != aloneRef {
		t.Fatalf("removed %v; want only %s (nobody else claimed it)", got, aloneRef)
	}
	for _, ref := range []string{pinned, pinRef, repullRef} {
		if !imagePresent(ref) {
			t.Errorf("%s is gone: someone else pulled its image after the agent", ref)
		}
	}
	rel := r.released()
	why := map[string]string{}
	for _, ir := range rel {
		why[ir.ImageID] = ir.Reason
	}
	if len(rel) != 2 || !strings.Contains(why[pinID], "pulled "+pinned) || !strings.Contains(why[repullID], "pulled "+repullRef) {
		t.Fatalf("image_released records %+v; want two, naming the operator's pulls of %s and %s", rel, pinned, repullRef)
	}
	if n := metricValue(t, r.e, "agentd_image_removal_failures_total"); n != 0 {
		t.Fatalf("agentd_image_removal_failures_total = %v: a release is no failure", n)
	}
	if n := metricValue(t, r.e, "agentd_images_released_total"); n != 2 {
		t.Fatalf("agentd_images_released_total = %v, want 2", n)
	}
}

// gcRig is an engine on the Docker Engine driven on a virtual clock: collection every 10 min,
// images unused for an hour, the runtime calls run in order on the test's goroutine;
// configure changes the engine's config and runtime before the engine is made.
type gcRig struct {
	t     *testing.T
	e     *engine.Engine
	j     *journal.Journal
	clock *testrig.Clock
	work  *testrig.Executor[engine.Input]
	msg   int
}

func newGCRig(t *testing.T, prefix string, configure ...func(*engine.Config, *docker.Engine)) *gcRig {
	t.Helper()
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	agentID := strings.ReplaceAll(prefix+"-"+time.Now().Format("150405.000"), ".", "")
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + agentID) })
	ctx := context.Background()
	rt, err := docker.NewEngine(ctx, "", agentID, docker.PullConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	j, err := journal.Open(filepath.Join(t.TempDir(), journal.FileName), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	r := &gcRig{t: t, j: j, clock: testrig.NewClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)), work: &testrig.Executor[engine.Input]{}}
	cfg := engine.Config{AgentID: agentID, CleanupWait: time.Minute, CleanupJitter: -1, Seed: 1,
		Images: engine.ImageGC{Interval: 10 * time.Minute, MinAge: time.Hour, PerCycle: 5}}
	for _, c := range configure {
		c(&cfg, rt)
	}
	r.e = engine.New(cfg, j, rt, &testrig.ControlPlane{}, r.clock, r.work, zerolog.Nop())
	if err := r.e.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// settle runs the released runtime calls, reports and collection questions, on this
// goroutine, until nothing more is released.
func (r *gcRig) settle() {
	r.t.Helper()
	ctx := context.Background()
	r.e.Step(ctx, nil)
	for i := 0; i < 1000; i++ {
		f := r.work.Next()
		if f == nil {
			return
		}
		r.e.Step(ctx, f())
	}
	r.t.Fatal("the engine did not settle in 1,000 steps")
}

func (r *gcRig) send(desired string, tasks ...protocol.Task) {
	r.t.Helper()
	r.msg++
	var raw []json.RawMessage
	for _, task := range tasks {
		task.DesiredStatus = desired
		b, _ := json.Marshal(task)
		raw = append(raw, b)
	}
	done := make(chan error, 1)
	r.e.Step(context.Background(), engine.PayloadInput{Payload: protocol.Payload{MessageID: fmt.Sprintf("m-%d", r.msg), Tasks: raw}, Done: done})
	if err := <-done; err != nil {
		r.t.Fatal(err)
	}
	r.settle()
}

func (r *gcRig) advance(d time.Duration) {
	r.t.Helper()
	end := r.clock.Now().Add(d)
	for {
		r.settle()
		next := r.e.NextWake()
		if next.IsZero() || next.After(end) {
			r.clock.Set(end)
			r.settle()
			return
		}
		r.clock.Set(next)
	}
}

func (r *gcRig) allRunning(tasks ...protocol.Task) {
	r.t.Helper()
	for _, task := range tasks {
		if k := r.e.State().Tasks[task.ARN].Known; k != event.StatusRunning {
			r.t.Fatalf("%s is %s, not RUNNING", task.ARN, k)
		}
	}
}

// removed lists the references of every image_removed record.
func (r *gcRig) removed() []string {
	var out []string
	_ = r.j.Iterate(1, func(rec event.Record) error {
		if ir, ok := rec.Event.(*event.ImageRemoved); ok {
			out = append(out, strings.Join(ir.Refs, ","))
		}
		return nil
	})
	return out
}

// released lists every image_released record.
func (r *gcRig) released() []*event.ImageReleased {
	var out []*event.ImageReleased
	_ = r.j.Iterate(1, func(rec event.Record) error {
		if ir, ok := rec.Event.(*event.ImageReleased); ok {
			out = append(out, ir)
		}
		return nil
	})
	return out
}

func gcTask(arn, image string) protocol.Task {
	return protocol.Task{ARN: arn, Containers: []protocol.Container{{Name: "app", Image: image, Command: []string{"run"}}}}
}

// metricValue reads one counter or gauge of the engine's registry.
func metricValue(t *testing.T, e *engine.Engine, name string) float64 {
	t.Helper()
	mfs, err := e.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}
