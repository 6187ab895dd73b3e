package simulation

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/event"
)

// hostImage is an image the operator put on the host: the agent may use it, never remove it.
const hostImage = "img-host"

// registries sets up the simulated runtime's images for a (re)start: the host's image, a disk
// that is sometimes nearly full (collection then ignores the age), pulls that take virtual
// time, fail for a while, or fail for good — all drawn from the seed.
func (s *sim) registries() {
	host, err := s.rt.Preload(hostImage)
	if err != nil {
		s.fail("preload %s: %v", hostImage, err)
	}
	s.hostImageID = host.ImageID
	s.rt.SetDisk(4<<30, uint64(s.pulls.IntN(4))<<30)
	s.rt.SetSleep(func(ctx context.Context, d time.Duration) error {
		s.clock.now = s.clock.now.Add(d) // the pull or its backoff takes virtual time
		return nil
	})
	s.rt.SetPullFaults(func(image string, try int) docker.SimPullFault {
		var f docker.SimPullFault
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
	for _, t := range s.e.State().SortedTasks() {
		for _, c := range t.Containers {
			if c.ImageID != "" && c.Known != event.StatusNone && !held[c.ImageID] {
				s.fail("IMAGE OF A LIVE TASK REMOVED: %s/%s uses %s (%s), which the runtime no longer holds", t.ARN, c.Name, c.Image, c.ImageID)
				return
			}
		}
	}
}
