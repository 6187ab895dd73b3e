package fsm_test

import (
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
