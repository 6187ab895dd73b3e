package docker

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/registrytest"
	"github.com/agentd/agentd/internal/runtime"
)

// The pulls of issue 17 against a registry of the test's own (internal/registrytest) on
// 127.0.0.1, which this machine's engine pulls from over plain HTTP.

// quickPulls are pull settings whose retries take milliseconds, logging into log.
func quickPulls(log *syncBuffer) PullConfig {
	return PullConfig{Tries: 4, RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		InactivityTimeout: 20 * time.Second, Log: zerolog.New(log)}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// forgetImages removes, when the test ends, the test agent's containers and then every image
// the engine holds under refs or ids: nothing the test made the engine pull outlives it.
func forgetImages(t *testing.T, agent string, refs ...string) {
	t.Cleanup(func() {
		removeAgentContainers(t, agent)
		for _, r := range refs {
			ids, _ := exec.Command("docker", "images", "-q", "--no-trunc", r).Output()
			for _, id := range strings.Fields(string(ids)) {
				_ = exec.Command("docker", "rmi", "-f", id).Run()
			}
			_ = exec.Command("docker", "rmi", "-f", r).Run()
		}
	})
}

func writeAuthFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func runToExit(t *testing.T, e *Engine, task, image string, cmd ...string) runtime.State {
	t.Helper()
	ctx := context.Background()
	id, err := e.Create(ctx, runtime.CreateSpec{Task: task, Container: event.ContainerSpec{Name: "app", Image: image, Command: cmd}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	return waitExit(t, e, id)
}

func TestDockerPullFromAPrivateRegistry(t *testing.T) {
	needDockerTests(t)
	const user, pass = "ci-robot", "s3cret-Pa55word"
	reg := registrytest.New(t)
	reg.RequireAuth(user, pass)
	img := registrytest.Testbox(t, "private")
	ref, digest := reg.Push(t, "team/app:1", img)
	other, _ := reg.Push(t, "team/app:2", img)

	var logs syncBuffer
	pc := quickPulls(&logs)
	auth, err := LoadRegistryAuth(writeAuthFile(t, reg.AuthFile(user, pass)), zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	pc.Auth = auth
	e, agent := dockerEngineWith(t, pc)
	forgetImages(t, agent, ref, other)
	ctx := context.Background()

	out, err := e.PullImage(ctx, ref, event.PullIfNotPresent)
	if err != nil {
		t.Fatalf("pull with credentials: %v\nregistry saw: %v", err, reg.Requests())
	}
	if !out.Pulled || out.Digest != digest || !strings.HasPrefix(out.ImageID, "sha256:") {
		t.Fatalf("outcome %+v; want pulled, digest %s (the pushed manifest's) and an image id", out, digest)
	}
	if st := runToExit(t, e, "task/private", ref, "exit", "7"); st.ExitCode != 7 {
		t.Fatalf("the pulled image ran and exited %d, want 7", st.ExitCode)
	}

	// Without credentials: unauthorized at once — one attempt, not four.
	var anonLogs syncBuffer
	anon, _ := dockerEngineWith(t, quickPulls(&anonLogs))
	before := reg.Count("GET /v2/ ")
	_, anonErr := anon.PullImage(ctx, other, event.PullIfNotPresent)
	if anonErr == nil || !strings.Contains(anonErr.Error(), "unauthorized") || !strings.Contains(anonErr.Error(), other) {
		t.Fatalf("pull without credentials: %v; want an error naming %s and saying unauthorized", anonErr, other)
	}
	// The engine's one attempt is one ping of /v2/, answered 401 (it has nothing to offer).
	if n := reg.Count("GET /v2/ ") - before; n != 1 {
		t.Fatalf("pull without credentials made %d attempts; a permanent failure is not retried\nregistry saw: %v", n, reg.Requests())
	}

	// Wrong credentials: unauthorized, and the wrong password shows nowhere either.
	const wrong = "not-the-Pa55word"
	bad, err := LoadRegistryAuth(writeAuthFile(t, reg.AuthFile(user, wrong)), zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	pcBad := quickPulls(&logs)
	pcBad.Auth = bad
	wrongEngine, _ := dockerEngineWith(t, pcBad)
	_, werr := wrongEngine.PullImage(ctx, other, event.PullAlways)
	if werr == nil || !strings.Contains(werr.Error(), "unauthorized") {
		t.Fatalf("pull with a wrong password: %v; want unauthorized", werr)
	}
	for _, secret := range []string{pass, wrong, base64.StdEncoding.EncodeToString([]byte(user + ":" + pass)),
		base64.StdEncoding.EncodeToString([]byte(user + ":" + wrong))} {
		for what, text := range map[string]string{"an error": anonErr.Error() + werr.Error(), "the log": logs.String() + anonLogs.String()} {
			if strings.Contains(text, secret) {
				t.Fatalf("a credential shows in %s: %s", what, text)
			}
		}
	}
}

func TestDockerPullPolicyAlwaysPicksUpARepushedTag(t *testing.T) {
	needDockerTests(t)
	reg := registrytest.New(t)
	ref, first := reg.Push(t, "app:1", registrytest.Testbox(t, "first"))
	var logs syncBuffer
	e, agent := dockerEngineWith(t, quickPulls(&logs))
	forgetImages(t, agent, ref)
	ctx := context.Background()
	one, err := e.PullImage(ctx, ref, event.PullIfNotPresent)
	if err != nil || one.Digest != first || !one.Pulled {
		t.Fatalf("first pull: %+v, %v; want digest %s, pulled", one, err, first)
	}
	_, second := reg.Push(t, "app:1", registrytest.Testbox(t, "second"))
	if second == first {
		t.Fatal("the re-push made the same digest")
	}
	kept, err := e.PullImage(ctx, ref, event.PullIfNotPresent)
	if err != nil || kept.Digest != first || kept.ImageID != one.ImageID || kept.Pulled {
		t.Fatalf("if-not-present after a re-push: %+v, %v; want the image it has (%s), not pulled", kept, err, first)
	}
	// The default policy (empty) is if-not-present too.
	if def, err := e.PullImage(ctx, ref, ""); err != nil || def.Digest != first {
		t.Fatalf("default policy after a re-push: %+v, %v; want the image it has", def, err)
	}
	fresh, err := e.PullImage(ctx, ref, event.PullAlways)
	if err != nil || fresh.Digest != second || fresh.ImageID == one.ImageID || !fresh.Pulled {
		t.Fatalf("always after a re-push: %+v, %v; want the new digest %s, a new image, pulled", fresh, err, second)
	}
	forgetImages(t, agent, one.ImageID)
	again, err := e.PullImage(ctx, ref, event.PullAlways)
	if err != nil || again.Digest != second || again.Pulled {
		t.Fatalf("always when up to date: %+v, %v; want digest %s and not pulled (nothing fetched)", again, err, second)
	}
}

func TestDockerPullInactivityTimeoutStopsAStallNotASlowPull(t *testing.T) {
	needDockerTests(t)
	reg := registrytest.New(t)
	// A big layer no other image has: the engine does not fetch a layer it holds, and the
	// testbox layer may be there (another package's Docker tests pull their own testbox images
	// at the same time), so the stall and the slow pull must come from a layer of this test's.
	own, err := random.Layer(24<<20, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(registrytest.Testbox(t, "slow"), own)
	if err != nil {
		t.Fatal(err)
	}
	ref, digest := reg.Push(t, "slow:1", img)
	var logs syncBuffer
	pc := quickPulls(&logs)
	pc.InactivityTimeout, pc.Tries = 2*time.Second, 2 // 2 s: a busy host's engine may report no byte for a second
	e, agent := dockerEngineWith(t, pc)
	forgetImages(t, agent, ref)
	ctx := context.Background()

	reg.StallAfter(64 << 10)
	t0 := time.Now()
	_, err = e.PullImage(ctx, ref, event.PullIfNotPresent)
	stalled := time.Since(t0)
	if err == nil || !strings.Contains(err.Error(), "no progress for 2s") || !strings.Contains(err.Error(), ref) {
		t.Fatalf("pull from a stalled registry: %v; want it to name %s and the inactivity timeout", err, ref)
	}
	if !strings.Contains(err.Error(), "2 times") {
		t.Fatalf("pull from a stalled registry: %v; a stall is transient, tried twice", err)
	}
	if stalled > 30*time.Second {
		t.Fatalf("two stalled tries with a 2 s inactivity timeout took %s", stalled)
	}

	// Slow but steady: the big layer takes about 6 s, three times the inactivity timeout.
	differsOnPodman(t, e, "pulls report each layer's start and end, not its bytes: a layer slower than the inactivity timeout ends the pull")
	reg.StallAfter(-1)
	size := registrytest.BlobBytes(t, img)
	reg.Throttle(int(size / 6))
	t0 = time.Now()
	out, err := e.PullImage(ctx, ref, event.PullIfNotPresent)
	took := time.Since(t0)
	if err != nil || out.Digest != digest {
		t.Fatalf("slow but steady pull: %+v, %v (after %s)", out, err, took)
	}
	if took < 4*time.Second {
		t.Fatalf("the throttled pull took only %s: it did not outlast twice the 2 s inactivity timeout, which proves nothing", took)
	}
	t.Logf("stalled: failed after %s (2 tries); slow (%d bytes at %d B/s): pulled in %s", stalled, size, size/6, took)
}

func TestDockerPullRetriesA503(t *testing.T) {
	needDockerTests(t)
	reg := registrytest.New(t)
	ref, digest := reg.Push(t, "flaky:1", registrytest.Testbox(t, "flaky"))
	var logs syncBuffer
	e, agent := dockerEngineWith(t, quickPulls(&logs))
	forgetImages(t, agent, ref)
	reg.Fail503(2)
	out, err := e.PullImage(context.Background(), ref, event.PullIfNotPresent)
	if err != nil || out.Digest != digest || !out.Pulled {
		t.Fatalf("pull after two 503s: %+v, %v\nregistry saw: %v", out, err, reg.Requests())
	}
	if n := reg.Count("/manifests/", " 503"); n != 2 {
		t.Fatalf("the registry answered 503 %d times, want 2\nregistry saw: %v", n, reg.Requests())
	}
	// The engine itself may ask twice in one attempt (HEAD, then GET): at least one retry
	// of agentd's own, and fewer than its four tries.
	if n := strings.Count(logs.String(), "trying again"); n < 1 || n > 2 {
		t.Fatalf("%d retries logged, want 1 or 2:\n%s", n, logs.String())
	}
	// One try only: the 503 is the answer.
	var one syncBuffer
	pc := quickPulls(&one)
	pc.Tries = 1
	single, _ := dockerEngineWith(t, pc)
	ref2, _ := reg.Push(t, "flaky:2", registrytest.Testbox(t, "flaky2"))
	forgetImages(t, agent, ref2)
	reg.Fail503(2)
	if _, err := single.PullImage(context.Background(), ref2, ""); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), ref2) {
		t.Fatalf("a single try against a 503: %v; want an error naming the image and the 503", err)
	}
}

func TestDockerPullAlwaysFallsBackToTheCachedImage(t *testing.T) {
	needDockerTests(t)
	reg := registrytest.New(t)
	ref, digest := reg.Push(t, "cached:1", registrytest.Testbox(t, "cached"))
	var logs syncBuffer
	e, agent := dockerEngineWith(t, quickPulls(&logs))
	forgetImages(t, agent, ref)
	ctx := context.Background()
	first, err := e.PullImage(ctx, ref, event.PullAlways)
	if err != nil {
		t.Fatal(err)
	}
	reg.Close() // the registry is gone
	out, err := e.PullImage(ctx, ref, event.PullAlways)
	if err != nil {
		t.Fatalf("always with the registry gone and the image cached: %v", err)
	}
	if out.Pulled || out.ImageID != first.ImageID || out.Digest != digest ||
		!strings.Contains(out.Note, "using the cached image "+first.ImageID) || !strings.Contains(out.Note, "4 tries") {
		t.Fatalf("outcome %+v; want the cached image, not pulled, with a note saying so after 4 tries", out)
	}
	// Absent, nothing to fall back to: the error says what failed.
	if _, err := e.PullImage(ctx, reg.Addr+"/never-pushed:1", event.PullAlways); err == nil || !strings.Contains(err.Error(), "failed transiently 4 times") {
		t.Fatalf("always with the registry gone and nothing cached: %v", err)
	}
}

func TestDockerRemoveImageRefusesAnImageInUse(t *testing.T) {
	needDockerTests(t)
	reg := registrytest.New(t)
	ref, _ := reg.Push(t, "gc:1", registrytest.Testbox(t, "gc"))
	var logs syncBuffer
	e, agent := dockerEngineWith(t, quickPulls(&logs))
	forgetImages(t, agent, ref)
	ctx := context.Background()
	out, err := e.PullImage(ctx, ref, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Create(ctx, runtime.CreateSpec{Task: "task/gc", Container: event.ContainerSpec{Name: "app", Image: ref, Command: []string{"exit", "0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveImage(ctx, out.ImageID, []string{ref}); !errors.Is(err, runtime.ErrImageInUse) {
		t.Fatalf("remove of an image a (created) container uses: %v; want ErrImageInUse", err)
	}
	if err := exec.Command("docker", "image", "inspect", out.ImageID).Run(); err != nil {
		t.Fatal("the image in use is gone")
	}
	if err := e.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveImage(ctx, out.ImageID, []string{ref}); err != nil {
		t.Fatalf("remove of an unused image: %v", err)
	}
	if err := exec.Command("docker", "image", "inspect", out.ImageID).Run(); err == nil {
		t.Fatal("RemoveImage said yes but the image is still there")
	}
	if err := e.RemoveImage(ctx, out.ImageID, []string{ref}); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("remove of a removed image: %v; want ErrNotFound", err)
	}
	free, total, err := e.ImageDiskFree(ctx)
	if err != nil || total == 0 || free > total {
		t.Fatalf("disk of the Docker root: free %d of %d, %v", free, total, err)
	}
}

// TestDockerAClaimNotYetStreamedIsCaughtUp: an operator's pull of the agent's image by digest,
// made just before a removal, keeps the image though the event stream has not delivered it:
// RemoveImage reads the engine's events up to now itself (on Podman, which replays nothing up
// to an end already past, a second ahead). The stream is held here as if subscribed and silent.
func TestDockerAClaimNotYetStreamedIsCaughtUp(t *testing.T) {
	needDockerTests(t)
	reg := registrytest.New(t)
	ref, digest := reg.Push(t, "caught:1", registrytest.Testbox(t, "caught"))
	pin := reg.Addr + "/caught@" + digest
	var logs syncBuffer
	e, agent := dockerEngineWith(t, quickPulls(&logs))
	forgetImages(t, agent, ref, pin)
	ctx := context.Background()
	own, err := e.PullImage(ctx, ref, "")
	if err != nil || !own.Pulled {
		t.Fatalf("pull of an image the engine lacked: %+v, %v; want the agent's", own, err)
	}
	e.unfollowClaims() // the stream delivers nothing more; its claims stand as it left them
	e.claims.setWatching(true)
	if out, err := exec.Command("docker", "pull", pin).CombinedOutput(); err != nil {
		t.Fatalf("the operator's docker pull %s: %v: %s", pin, err, out)
	}
	err = e.RemoveImage(ctx, own.ImageID, []string{ref})
	if !errors.Is(err, runtime.ErrImageInUse) || !strings.Contains(err.Error(), "pulled "+pin) {
		t.Fatalf("remove of the agent's image an operator pulled by digest since: %v; want ErrImageInUse naming the pull of %s", err, pin)
	}
	if exec.Command("docker", "image", "inspect", pin).Run() != nil {
		t.Fatalf("the image the operator pulled as %s is gone", pin)
	}
}

// TestDockerImagesAreTheAgentsOnlyByID: an image is the agent's only when its pull fetched an
// id the engine did not hold: a tag pulled for a task that resolves to the image an operator
// pulled by digest is not (the reference was absent, so the agent took it for its own before
// issue 22). And a removal takes back only the agent's own name: with an operator's second tag
// on the image, the engine keeps the image under that tag and says what holds it
// (ErrImageInUse); with no other name, the image goes with the agent's.
func TestDockerImagesAreTheAgentsOnlyByID(t *testing.T) {
	needDockerTests(t)
	reg := registrytest.New(t)
	taskRef, digest := reg.Push(t, "pinned:task", registrytest.Testbox(t, "pinned"))
	pinned := reg.Addr + "/pinned@" + digest
	ownRef, _ := reg.Push(t, "own:1", registrytest.Testbox(t, "own"))
	opsTag := fmt.Sprintf("agentd-ops-keep-%d:1", time.Now().UnixNano())
	var logs syncBuffer
	e, agent := dockerEngineWith(t, quickPulls(&logs))
	forgetImages(t, agent, taskRef, pinned, ownRef, opsTag)
	ctx := context.Background()
	if out, err := exec.Command("docker", "pull", pinned).CombinedOutput(); err != nil {
		t.Fatalf("the operator's docker pull %s: %v: %s", pinned, err, out)
	}
	out, err := e.PullImage(ctx, taskRef, "")
	if err != nil {
		t.Fatal(err)
	}
	if out.Pulled || out.RefExisted || out.Digest != digest {
		t.Fatalf("pull of %s, the image the host held as %s: %+v; want not the agent's (Pulled false), a name it made", taskRef, pinned, out)
	}

	own, err := e.PullImage(ctx, ownRef, "")
	if err != nil || !own.Pulled {
		t.Fatalf("pull of an image the engine lacked: %+v, %v; want the agent's", own, err)
	}
	if b, err := exec.Command("docker", "tag", ownRef, opsTag).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v: %s", err, b)
	}
	err = e.RemoveImage(ctx, own.ImageID, []string{ownRef})
	if !errors.Is(err, runtime.ErrImageInUse) || !strings.Contains(err.Error(), opsTag) {
		t.Fatalf("remove of the agent's image that an operator tagged too: %v; want ErrImageInUse naming %s", err, opsTag)
	}
	if exec.Command("docker", "image", "inspect", opsTag).Run() != nil {
		t.Fatalf("the operator's %s is gone", opsTag)
	}
	if exec.Command("docker", "image", "inspect", ownRef).Run() == nil {
		t.Fatalf("the agent's name %s is still there: a removal takes it back", ownRef)
	}
	if b, err := exec.Command("docker", "rmi", opsTag).CombinedOutput(); err != nil {
		t.Fatalf("docker rmi %s: %v: %s", opsTag, err, b)
	}
	// Pulled again and named only by the agent: it goes with the agent's name.
	if again, err := e.PullImage(ctx, ownRef, ""); err != nil || !again.Pulled {
		t.Fatalf("pull again: %+v, %v", again, err)
	}
	if err := e.RemoveImage(ctx, own.ImageID, []string{ownRef}); err != nil {
		t.Fatalf("remove of the agent's image named only by the agent: %v", err)
	}
	if exec.Command("docker", "image", "inspect", own.ImageID).Run() == nil {
		t.Fatal("RemoveImage said yes but the image is still there")
	}
}

// A container is made from the image its pull resolved to, not from the reference: a tag that
// moved in between (another task's always pull of a re-push) does not change what runs, so the
// digest journaled with the container is the one it runs.
func TestDockerCreateRunsThePulledImageAfterTheTagMoved(t *testing.T) {
	needDockerTests(t)
	reg := registrytest.New(t)
	ref, _ := reg.Push(t, "moving:1", registrytest.Testbox(t, "before"))
	var logs syncBuffer
	e, agent := dockerEngineWith(t, quickPulls(&logs))
	forgetImages(t, agent, ref)
	ctx := context.Background()
	pulled, err := e.PullImage(ctx, ref, "")
	if err != nil {
		t.Fatal(err)
	}
	forgetImages(t, agent, pulled.ImageID)
	reg.Push(t, "moving:1", registrytest.Testbox(t, "after"))
	moved, err := e.PullImage(ctx, ref, event.PullAlways)
	if err != nil || moved.ImageID == pulled.ImageID {
		t.Fatalf("the tag did not move: %+v, %v", moved, err)
	}
	id, err := e.Create(ctx, runtime.CreateSpec{Task: "task/moving", Container: event.ContainerSpec{Name: "app", Image: ref, Command: []string{"run"}}, ImageID: pulled.ImageID})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{.Image}}", id).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != pulled.ImageID {
		t.Fatalf("the container runs image %s; its pull resolved to %s (the tag now names %s)", got, pulled.ImageID, moved.ImageID)
	}
}
