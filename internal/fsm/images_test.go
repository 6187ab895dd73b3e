package fsm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// A live task that has not pulled yet (its pull waits out a backoff, say) names an image the
// agent pulled by another spelling of the same reference: Docker Hub's short form, or the
// implicit :latest tag. The image is the one that task is about to use, so collection must
// not choose it — whatever the disk says. A collector comparing the strings as written
// removes it, and a task with pull_policy never then fails for an image the agent deleted.
func TestCollectImagesKeepsAnImageALiveTaskNamesByAnotherSpelling(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ pulledAs, wantedAs string }{
		{"docker.io/library/web:1", "web:1"},
		{"web:1", "docker.io/library/web:1"},
		{"library/web:1", "web:1"},
		{"reg.example.com/app", "reg.example.com/app:latest"},
		{"web:latest", "web"},
	} {
		t.Run(tc.pulledAs+" vs "+tc.wantedAs, func(t *testing.T) {
			s := fsm.New()
			s.Images["sha256:web"] = &fsm.Image{ID: "sha256:web", Digest: "sha256:d-web", Refs: []string{tc.pulledAs}, PulledAt: t0, LastUsed: t0}
			c := &fsm.Container{ContainerSpec: event.ContainerSpec{Name: "app", Image: tc.wantedAs}}
			s.Tasks["t2"] = &fsm.Task{ARN: "t2", Known: event.StatusNone, Desired: event.StatusRunning, Containers: []*fsm.Container{c}}
			if acts := s.CollectImages(t0.Add(48*time.Hour), fsm.ImageConfig{MinAge: time.Hour, PerCycle: 5}, true); len(acts) != 0 {
				t.Fatalf("collection chose %v, the image live task t2 is about to use (%s pulled as %s)", acts, tc.wantedAs, tc.pulledAs)
			}
		})
	}
	// A different repository or tag is not the same reference: still collected.
	s := fsm.New()
	s.Images["sha256:web"] = &fsm.Image{ID: "sha256:web", Refs: []string{"docker.io/library/web:1"}, PulledAt: t0, LastUsed: t0}
	s.Tasks["t3"] = &fsm.Task{ARN: "t3", Containers: []*fsm.Container{{ContainerSpec: event.ContainerSpec{Name: "app", Image: "web:2"}}}}
	if acts := s.CollectImages(t0.Add(48*time.Hour), fsm.ImageConfig{MinAge: time.Hour, PerCycle: 5}, false); len(acts) != 1 {
		t.Fatalf("collection chose %v; want the unused web:1 image", acts)
	}
}

// A removal the runtime refuses because another name or a container not the agent's holds
// the image ends the agent's claim: one image_released record, after which the image is no
// longer the agent's — never chosen again, whatever the age or the disk — and a replay agrees.
// Any other failure records nothing: the image stays the agent's, for a later cycle.
func TestARefusedRemovalEndsTheClaim(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	img := func() *fsm.State {
		s := fsm.New()
		s.Images["sha256:app"] = &fsm.Image{ID: "sha256:app", Digest: "sha256:d-app", Refs: []string{"reg/app:1"}, PulledAt: t0, LastUsed: t0}
		return s
	}
	cfg := fsm.ImageConfig{MinAge: time.Hour, PerCycle: 5}

	s := img()
	acts := s.CollectImages(t0.Add(2*time.Hour), cfg, false)
	if len(acts) != 1 || len(acts[0].Refs) != 1 || acts[0].Refs[0] != "reg/app:1" {
		t.Fatalf("collection chose %+v; want the image, with the agent's reference to take back", acts)
	}
	if v := s.Step(t0.Add(2*time.Hour), fsm.ActionFinished{Action: acts[0], Result: fsm.Result{Kind: fsm.Failed, Err: "engine error"}}); len(v.Records) != 0 {
		t.Fatalf("a failed removal recorded %v; the image stays the agent's", v.Records)
	}
	v := s.Step(t0.Add(2*time.Hour), fsm.ActionFinished{Action: acts[0], Result: fsm.Result{Kind: fsm.Refused, Err: "still named ops/keep:1"}})
	if len(v.Records) != 1 {
		t.Fatalf("a refused removal recorded %v; want one image_released", v.Records)
	}
	rel, ok := v.Records[0].Event.(*event.ImageReleased)
	if !ok || rel.ImageID != "sha256:app" || rel.Reason != "still named ops/keep:1" || len(rel.Refs) != 1 {
		t.Fatalf("record %+v; want image_released of sha256:app saying what holds it", v.Records[0].Event)
	}
	rec := event.Record{Seq: 1, Time: t0.Add(2 * time.Hour), Event: rel}
	if err := s.Apply(rec); err != nil {
		t.Fatal(err)
	}
	if len(s.Images) != 0 {
		t.Fatalf("images after the release: %v; want none", s.Images)
	}
	if acts := s.CollectImages(t0.Add(100*time.Hour), cfg, true); len(acts) != 0 {
		t.Fatalf("collection chose %v after the claim ended", acts)
	}
	// journal verify: a release of an image the agent holds is fine; of one it does not, named.
	c := fsm.NewChecker(img())
	c.Record(rec)
	c.Record(event.Record{Seq: 2, Time: t0.Add(3 * time.Hour), Event: &event.ImageReleased{ImageID: "sha256:host"}})
	if len(c.Violations) != 1 || c.Violations[0].Seq != 2 || c.Violations[0].Rule != fsm.RuleImageNotPulled {
		t.Fatalf("violations %v; want only record 2, a release of an image the agent did not pull", c.Violations)
	}
}

// A pull whose reference already named the image made no name: it is not added to the agent's
// references of its image (collection would take back a name that is someone else's); a
// reference the agent's pull made name the image is.
func TestOnlyNamesTheAgentMadeAreTakenBack(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	s := fsm.New()
	seq := uint64(0)
	add := func(arn, image string, e *event.ContainerTransitioned) {
		t.Helper()
		seq++
		if err := s.Apply(event.Record{Seq: seq, Time: t0, Task: arn, Event: &event.TaskAdded{Desired: event.StatusRunning,
			Containers: []event.ContainerSpec{{Name: "app", Image: image, Essential: true}}}}); err != nil {
			t.Fatal(err)
		}
		seq++
		e.From, e.To, e.ImageID = event.StatusNone, event.StatusPulled, "sha256:app"
		if err := s.Apply(event.Record{Seq: seq, Time: t0, Task: arn, Container: "app", Event: e}); err != nil {
			t.Fatal(err)
		}
	}
	add("t1", "reg/app:1", &event.ContainerTransitioned{ImagePulled: true})
	add("t2", "ops/keep:1", &event.ContainerTransitioned{ImageRefExisted: true})
	add("t3", "reg/app:2", &event.ContainerTransitioned{})
	if img := s.Images["sha256:app"]; img == nil || strings.Join(img.Refs, ",") != "reg/app:1,reg/app:2" {
		t.Fatalf("the agent's image: %+v; want refs reg/app:1 and reg/app:2, not the operator's ops/keep:1", img)
	}
}

// A collection cycle's rules (fsm.State.PlanImageCycle), each row one: put off while a pull
// is out, but not for ever on a low disk; a refused image sits out for ImageSitOut; a low disk
// makes age not count; a disk that could not be read is not low.
func TestPlanImageCycle(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	pullOut := fsm.NewInFlight(0)
	pullOut.Add(fsm.ActionKey{Kind: fsm.ActPull, Task: "t1", Container: "app"})
	cfg := fsm.ImageConfig{MinAge: time.Hour, PerCycle: 5, LowFreePercent: 10}
	const full, roomy = 5, 50 // free percent of 100
	for _, tc := range []struct {
		name         string
		free         uint64
		spaceErr     bool
		out          fsm.InFlight
		deferred     int
		refused      map[string]time.Time
		wantDefer    bool
		wantDeferred int
		wantLow      bool
		want         string // the images removed, in order
		wantForget   string
	}{
		{name: "nothing out: the aged image goes", free: roomy, out: fsm.NewInFlight(0), want: "old"},
		{name: "a pull out: put off", free: roomy, out: pullOut, deferred: 3, wantDefer: true, wantDeferred: 4},
		{name: "a pull out, disk low: put off up to the limit", free: full, out: pullOut, deferred: fsm.ImageDeferLimit - 1, wantDefer: true, wantDeferred: fsm.ImageDeferLimit, wantLow: true},
		{name: "a pull out, disk low, past the limit: goes on, age not counting", free: full, out: pullOut, deferred: fsm.ImageDeferLimit, wantLow: true, want: "old,young"},
		{name: "a pull out, disk roomy, past the limit: still put off", free: roomy, out: pullOut, deferred: 50, wantDefer: true, wantDeferred: 51},
		{name: "disk low: age does not count", free: full, out: fsm.NewInFlight(0), wantLow: true, want: "old,young"},
		{name: "disk unreadable: not low, by age only", free: 0, spaceErr: true, out: fsm.NewInFlight(0), want: "old"},
		{name: "refused lately: sits out", free: full, out: fsm.NewInFlight(0), refused: map[string]time.Time{"old": t0.Add(-fsm.ImageSitOut + time.Minute)}, wantLow: true, want: "young"},
		{name: "refused long ago, or gone: forgotten", free: roomy, out: fsm.NewInFlight(0),
			refused: map[string]time.Time{"old": t0.Add(-fsm.ImageSitOut), "gone": t0}, want: "old", wantForget: "gone,old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fsm.New()
			s.Images["old"] = &fsm.Image{ID: "old", Refs: []string{"old:1"}, LastUsed: t0.Add(-2 * time.Hour)}
			s.Images["young"] = &fsm.Image{ID: "young", Refs: []string{"young:1"}, LastUsed: t0.Add(-time.Minute)}
			p := s.PlanImageCycle(t0, cfg, fsm.ImageCycle{Free: tc.free, Total: 100, SpaceErr: tc.spaceErr, Deferred: tc.deferred, Refused: tc.refused}, tc.out)
			var removed []string
			for _, a := range p.Removals {
				removed = append(removed, a.RuntimeID)
			}
			if p.Defer != tc.wantDefer || p.Deferred != tc.wantDeferred || p.Low != tc.wantLow || strings.Join(removed, ",") != tc.want || strings.Join(p.Forget, ",") != tc.wantForget {
				t.Fatalf("plan: defer=%v deferred=%d low=%v removals=%v forget=%v; want defer=%v deferred=%d low=%v removals=%s forget=%s",
					p.Defer, p.Deferred, p.Low, removed, p.Forget, tc.wantDefer, tc.wantDeferred, tc.wantLow, tc.want, tc.wantForget)
			}
		})
	}
}

// A removal the runtime answers with an error makes the image sit out (Verdict.SitOut); one it
// did not answer, or kept for another's sake (released), does not.
func TestImageRemovalSitsOutOnlyWhenRefusedWithAnError(t *testing.T) {
	for kind, want := range map[fsm.ResultKind]bool{fsm.Failed: true, fsm.Unavailable: false, fsm.Unknown: false, fsm.Refused: false, fsm.Succeeded: false} {
		s := fsm.New()
		s.Images["x"] = &fsm.Image{ID: "x", Refs: []string{"x:1"}}
		a := fsm.Action{Kind: fsm.ActRemoveImage, Container: "x", RuntimeID: "x"}
		if v := s.Step(time.Time{}, fsm.ActionFinished{Action: a, Result: fsm.Result{Kind: kind}}); v.SitOut != want {
			t.Errorf("removal answered %v: SitOut %v; want %v", kind, v.SitOut, want)
		}
	}
}
