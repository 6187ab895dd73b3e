package simruntime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// simWithClock is a simulated runtime whose pulls take virtual time: sleeping advances the
// clock, as the simulation does.
func simWithClock(t *testing.T, dir string) (*Runtime, *time.Time) {
	t.Helper()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s, err := Open(dir, "agent-1", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	s.SetSleep(func(ctx context.Context, d time.Duration) error { now = now.Add(d); return ctx.Err() })
	return s, &now
}

func TestSimPullPolicies(t *testing.T) {
	s, _ := simWithClock(t, t.TempDir())
	ctx := context.Background()
	const img = "registry.example:5000/app:1"
	if _, err := s.PullImage(ctx, img, event.PullNever); err == nil || !strings.Contains(err.Error(), "not present, and pull_policy is never") {
		t.Fatalf("never of an absent image: %v", err)
	}
	first, err := s.PullImage(ctx, img, "")
	if err != nil || !first.Pulled || !strings.HasPrefix(first.Digest, "sha256:") || !strings.HasPrefix(first.ImageID, "sha256:") || first.Digest == first.ImageID {
		t.Fatalf("first pull: %+v, %v", first, err)
	}
	if err := s.RepushImage(img); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", event.PullIfNotPresent, event.PullNever} {
		if out, err := s.PullImage(ctx, img, p); err != nil || out.Pulled || out.Digest != first.Digest {
			t.Fatalf("%q after a re-push: %+v, %v; want the image it has", p, out, err)
		}
	}
	fresh, err := s.PullImage(ctx, img, event.PullAlways)
	if err != nil || !fresh.Pulled || fresh.Digest == first.Digest || fresh.ImageID == first.ImageID {
		t.Fatalf("always after a re-push: %+v, %v; want a new image", fresh, err)
	}
	if again, err := s.PullImage(ctx, img, event.PullAlways); err != nil || again.Pulled || again != (runtime.PullOutcome{Digest: fresh.Digest, ImageID: fresh.ImageID, RefExisted: true}) {
		t.Fatalf("always when up to date: %+v, %v; want the same image, not pulled", again, err)
	}
	// The agent's default policy applies to a container that names none.
	if err := s.SetDefaultPullPolicy(event.PullAlways); err != nil {
		t.Fatal(err)
	}
	_ = s.RepushImage(img)
	if out, err := s.PullImage(ctx, img, ""); err != nil || !out.Pulled {
		t.Fatalf("default policy always: %+v, %v; want a pull", out, err)
	}
	if err := s.SetDefaultPullPolicy("sometimes"); err == nil || !strings.Contains(err.Error(), "--pull-policy") {
		t.Fatalf("a bad default policy: %v", err)
	}
	if _, err := s.PullImage(ctx, "UPPER/Case", ""); err == nil || !strings.Contains(err.Error(), "bad reference") {
		t.Fatalf("a bad reference: %v", err)
	}
	// A preloaded image is not the agent's: not pulled, even when "always" finds it current.
	pre, err := s.Preload("ops/base:7")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := s.PullImage(ctx, "ops/base:7", event.PullAlways); err != nil || out.Pulled || out.ImageID != pre.ImageID {
		t.Fatalf("always of a current preloaded image: %+v, %v; want it as it is, not pulled", out, err)
	}
}

func TestSimPullFaults(t *testing.T) {
	s, now := simWithClock(t, t.TempDir())
	ctx := context.Background()
	tries := map[string]int{}
	s.SetPullFaults(func(image string, try int) PullFault {
		tries[image] = try
		switch {
		case strings.Contains(image, "slow"):
			return PullFault{Took: 90 * time.Second}
		case strings.Contains(image, "flaky"):
			return PullFault{Transient: try <= 2}
		case strings.Contains(image, "down"):
			return PullFault{Transient: true}
		case strings.Contains(image, "private"):
			return PullFault{Permanent: "unauthorized: authentication required"}
		}
		return PullFault{}
	})
	t0 := *now
	if out, err := s.PullImage(ctx, "slow:1", ""); err != nil || !out.Pulled || now.Sub(t0) != 90*time.Second {
		t.Fatalf("slow pull: %+v, %v, took %s of simulated time; want 90 s", out, err, now.Sub(t0))
	}
	t0 = *now
	if out, err := s.PullImage(ctx, "flaky:1", ""); err != nil || !out.Pulled || tries["flaky:1"] != 3 || now.Sub(t0) != 3*time.Second {
		t.Fatalf("two transient failures: %+v, %v, %d tries, %s backing off; want pulled on try 3 after 1 s + 2 s", out, err, tries["flaky:1"], now.Sub(t0))
	}
	if _, err := s.PullImage(ctx, "down:1", ""); err == nil || !strings.Contains(err.Error(), "failed transiently 4 times") || !strings.Contains(err.Error(), "down:1") {
		t.Fatalf("a registry that stays down: %v", err)
	}
	if _, err := s.PullImage(ctx, "private:1", ""); err == nil || !strings.Contains(err.Error(), "pull private:1: unauthorized") || tries["private:1"] != 1 {
		t.Fatalf("a permanent failure: %v after %d tries; want unauthorized at once", err, tries["private:1"])
	}
	if _, err := s.PullImage(ctx, "x/fail-pull:1", event.PullAlways); err == nil || !strings.Contains(err.Error(), "manifest unknown") {
		t.Fatalf("fail-pull: %v", err)
	}
	// always with the registry down and the image cached: the cached image, said so.
	s.SetPullFaults(nil)
	cached, err := s.PullImage(ctx, "down:2", "")
	if err != nil {
		t.Fatal(err)
	}
	s.SetPullFaults(func(string, int) PullFault { return PullFault{Transient: true} })
	out, err := s.PullImage(ctx, "down:2", event.PullAlways)
	if err != nil || out.Pulled || out.ImageID != cached.ImageID || !strings.Contains(out.Note, "using the cached image "+cached.ImageID) {
		t.Fatalf("always, registry down, image cached: %+v, %v", out, err)
	}
	// A context that ends mid-pull ends it.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.PullImage(cctx, "never-pulled:1", ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled pull: %v", err)
	}
}

func TestSimImagesAreRemovedOnlyWhenUnused(t *testing.T) {
	dir := t.TempDir()
	s, _ := simWithClock(t, dir)
	ctx := context.Background()
	freeBefore, total, _ := s.ImageDiskFree(ctx)
	app, err := s.PullImage(ctx, "app:1", "")
	if err != nil {
		t.Fatal(err)
	}
	free, total2, _ := s.ImageDiskFree(ctx)
	if total2 != total || free >= freeBefore {
		t.Fatalf("disk: free %d → %d of %d; a pulled image takes room", freeBefore, free, total)
	}
	id, err := s.Create(ctx, runtime.CreateSpec{Task: "task/1", Container: event.ContainerSpec{Name: "app", Image: "app:1", Command: []string{"exit", "0"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Another agent's container on the same engine holds its image too.
	other, err := Open(dir, "agent-2", nil)
	if err != nil {
		t.Fatal(err)
	}
	side, err := s.PullImage(ctx, "side:1", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(ctx, runtime.CreateSpec{Task: "task/2", Container: event.ContainerSpec{Name: "x", Image: "side:1"}}); err != nil {
		t.Fatal(err)
	}
	s, _ = simWithClock(t, dir) // reread: the other agent's container is in the file
	withBoth, _, _ := s.ImageDiskFree(ctx)
	for ref, img := range map[string]runtime.PullOutcome{"app:1": app, "side:1": side} {
		if err := s.RemoveImage(ctx, img.ImageID, []string{ref}); !errors.Is(err, runtime.ErrImageInUse) {
			t.Fatalf("remove of an image in use: %v; want docker.ErrImageInUse", err)
		}
	}
	if err := s.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveImage(ctx, app.ImageID, []string{"app:1"}); err != nil {
		t.Fatalf("remove of an unused image: %v", err)
	}
	if err := s.RemoveImage(ctx, app.ImageID, []string{"app:1"}); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("remove of a removed image: %v; want runtime.ErrNotFound", err)
	}
	if after, _, _ := s.ImageDiskFree(ctx); after <= withBoth {
		t.Fatalf("disk: free %d after removing an image, %d before; the room must come back", after, withBoth)
	}
	// The engine's images outlive the agent (they are in the runtime's file).
	again, _ := simWithClock(t, dir)
	imgs := again.Images()
	if len(imgs) != 1 || imgs[0].ImageID != side.ImageID || !imgs[0].Pulled {
		t.Fatalf("images after a reopen: %+v; want side:1 only, pulled", imgs)
	}
	s.SetDisk(1<<30, 1<<30)
	if free, total, _ := s.ImageDiskFree(ctx); free != 0 || total != 1<<30 {
		t.Fatalf("a full disk: free %d of %d", free, total)
	}
}

// TestSimImagesAreTheAgentsOnlyByID: the simulated engine models what Docker does with an
// image the host already had under another name, and with an image more than one name holds:
// a pull that resolves to an id the engine held is not the agent's; a removal takes back the
// agent's name only, and the image stays while another name holds it (runtime.ErrImageInUse says
// which) — even a container using it does not keep a name that is not the image's last; a
// tag's re-push leaves the old image dangling, removed by id.
func TestSimImagesAreTheAgentsOnlyByID(t *testing.T) {
	s, _ := simWithClock(t, t.TempDir())
	ctx := context.Background()
	pinned, err := s.Preload("reg.example/app@sha256:" + strings.Repeat("a", 64))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetAlias("reg.example/app:task", "reg.example/app@sha256:"+strings.Repeat("a", 64)); err != nil {
		t.Fatal(err)
	}
	out, err := s.PullImage(ctx, "reg.example/app:task", "")
	if err != nil || out.Pulled || out.RefExisted || out.ImageID != pinned.ImageID {
		t.Fatalf("pull of a tag of the image the host had pinned: %+v, %v; want that image, not the agent's", out, err)
	}
	// Why it must not be the agent's: on Docker, taking back the tag takes the digest name of
	// the same repository with it, and the image.
	if err := s.RemoveImage(ctx, pinned.ImageID, []string{"reg.example/app:task"}); err != nil {
		t.Fatalf("untag of the only tag of the repository: %v", err)
	}
	for _, img := range s.Images() {
		if img.ImageID == pinned.ImageID {
			t.Fatal("the digest name of the same repository stayed: Docker drops it with the repository's last tag")
		}
	}
	if _, err := s.Preload("reg.example/app@sha256:" + strings.Repeat("a", 64)); err != nil {
		t.Fatal(err)
	}

	own, err := s.PullImage(ctx, "own:1", "")
	if err != nil || !own.Pulled {
		t.Fatalf("pull: %+v, %v", own, err)
	}
	if _, err := s.Create(ctx, runtime.CreateSpec{Task: "task/1", Container: event.ContainerSpec{Name: "app", Image: "own:1"}, ImageID: own.ImageID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Tag("own:1", "ops/keep:1"); err != nil {
		t.Fatal(err)
	}
	err = s.RemoveImage(ctx, own.ImageID, []string{"own:1"})
	if !errors.Is(err, runtime.ErrImageInUse) || !strings.Contains(err.Error(), "ops/keep:1") {
		t.Fatalf("remove of an image an operator tagged too: %v; want docker.ErrImageInUse naming the tag", err)
	}
	held := map[string]bool{}
	for _, img := range s.Images() {
		held[img.ImageID] = true
	}
	if !held[own.ImageID] || !held[pinned.ImageID] {
		t.Fatalf("images after: %+v; both must stay", s.Images())
	}
	if again, err := s.PullImage(ctx, "own:1", event.PullNever); err == nil {
		t.Fatalf("own:1 still names the image (%+v): its removal takes the agent's name back", again)
	}

	// A re-push moves the tag: the old image is left with no name and goes by id.
	first, _ := s.PullImage(ctx, "moving:1", "")
	_ = s.RepushImage("moving:1")
	if _, err := s.PullImage(ctx, "moving:1", event.PullAlways); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveImage(ctx, first.ImageID, nil); err != nil {
		t.Fatalf("remove of the dangling image: %v", err)
	}
	if err := s.RemoveImage(ctx, first.ImageID, nil); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("remove again: %v; want runtime.ErrNotFound", err)
	}
}
