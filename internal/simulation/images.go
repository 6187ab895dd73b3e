package simulation

import (
	"context"
	"errors"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/simruntime"
)

// hostImage is an image the operator put on the host: the agent may use it, never remove it.
// hostPinned is another, which the operator pulled by digest, and hostTag a tag of the same
// repository that serves the very same image: a task naming hostTag pulls, and the image
// still is not the agent's (on Docker, taking back the agent's tag would take the digest
// name of the same repository with it, and the image). opsTag is the operator's own tag on
// an image the agent pulled.
const (
	hostImage  = "img-host"
	hostPinned = "img-pinned@sha256:5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed"
	hostTag    = "img-pinned:task"
	opsTag     = "ops/img-b-keep"
)

// registries sets up the simulated runtime's images for a (re)start: the host's image, a disk
// that is sometimes nearly full (collection then ignores the age), pulls that take virtual
// time, fail for a while, or fail for good — all drawn from the seed.
func (s *sim) registries() {
	host, err := s.rt.Preload(hostImage)
	if err != nil {
		s.fail("preload %s: %v", hostImage, err)
	}
	s.hostImageID = host.ImageID
	pinned, err := s.rt.Preload(hostPinned)
	if err != nil {
		s.fail("preload %s: %v", hostPinned, err)
	}
	s.hostPinnedID = pinned.ImageID
	if err := s.rt.SetAlias(hostTag, hostPinned); err != nil {
		s.fail("alias %s: %v", hostTag, err)
	}
	if s.opsTaggedID == "" && s.o.Seed%3 == 0 { // no draw: the seeds' other draws stay as they were
		// While the agent was down, the operator tagged the agent's img-b for their own use:
		// collection may take back the agent's name, never the image.
		tagged, err := s.rt.Tag("img-b", opsTag)
		switch {
		case err == nil:
			s.opsTaggedID = tagged.ImageID
		case !errors.Is(err, runtime.ErrNotFound):
			s.fail("tag %s: %v", opsTag, err)
		}
	}
	s.rt.SetDisk(4<<30, uint64(s.pulls.IntN(4))<<30)
	s.rt.SetSleep(func(ctx context.Context, d time.Duration) error {
		s.clock.now = s.clock.now.Add(d) // the pull or its backoff takes virtual time
		return nil
	})
	s.rt.SetPullFaults(func(image string, try int) simruntime.PullFault {
		var f simruntime.PullFault
		f.Took = time.Duration(s.pulls.IntN(3000)) * time.Millisecond
		if !s.faults {
			return f
		}
		switch k := s.pulls.IntN(100); {
		case k < 10:
			f.Transient = true
		case k < 11:
			f.Permanent = "unauthorized: authentication required"
		}
		return f
	})
	if s.pulls.IntN(4) == 0 {
		if err := s.rt.RepushImage("img"); err != nil { // a new build under the same tag
			s.fail("repush: %v", err)
		}
	}
}

// checkImages: image collection never removed an image a task that is not cleaned uses, nor
// one the agent did not pull.
func (s *sim) checkImages() {
	held := map[string]bool{}
	for _, img := range s.rt.Images() {
		held[img.ImageID] = true
	}
	if !held[s.hostImageID] {
		s.fail("HOST IMAGE REMOVED: %s, which the agent did not pull, is gone", hostImage)
	}
	if !held[s.hostPinnedID] {
		s.fail("HOST IMAGE REMOVED: %s, which the agent did not pull (tasks named it %s), is gone", hostPinned, hostTag)
	}
	if s.opsTaggedID != "" && !held[s.opsTaggedID] {
		s.fail("TAGGED IMAGE REMOVED: %s, which the operator tagged %s, is gone", s.opsTaggedID, opsTag)
	}
	for _, t := range s.e.State().SortedTasks() {
		for _, c := range t.Containers {
			if c.ImageID != "" && c.Known != event.StatusNone && !held[c.ImageID] {
				s.fail("IMAGE OF A LIVE TASK REMOVED: %s/%s uses %s (%s), which the runtime no longer holds", t.ARN, c.Name, c.Image, c.ImageID)
				return
			}
		}
	}
}
