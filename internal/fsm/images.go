package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// Image garbage collection. The projection keeps the images this agent pulled (journaled with
// the PULLED of the container that pulled them) and decides which to remove. It promises:
//   - An image is the agent's only if its pull fetched it: its id was absent before (an image
//     the host had under another name — an operator's digest-pinned pull — never is).
//   - Only images this agent pulled are removed: Apply refuses an image_removed of any other,
//     so `journal verify` names such a removal. A removal takes back only the names the
//     agent's pulls made (the runtime deletes the image with the last of them); when another
//     name or a container not the agent's holds the image, the runtime keeps it and the
//     agent's claim ends (image_released): it is never asked for again.
//   - No image a task that is not cleaned uses, or is about to pull, is chosen: a task keeps
//     its images until its cleanup is journaled, whatever its state.
//   - An image is chosen only after it went unused for the configured age — counted from its
//     last pull or the cleanup of the last task that used it — unless the runtime's disk is
//     low; oldest first, a bounded number a cycle.

// Image is an image this agent pulled and has not removed.
type Image struct {
	ID       string    `json:"id"`
	Digest   string    `json:"digest,omitempty"`
	Refs     []string  `json:"refs"` // the references the agent's pulls made name it, until one resolves to another image (a re-pushed tag)
	PulledAt time.Time `json:"pulled_at"`
	LastUsed time.Time `json:"last_used"` // its last pull, or the cleanup of the last task that used it
}

// ImageConfig is how images are collected; not journaled (an operator may change it).
type ImageConfig struct {
	MinAge         time.Duration // unused at least this long before it is removed
	PerCycle       int           // at most this many removals a cycle
	LowFreePercent int           // below this much free space on the runtime's disk, age does not count
	// Skip holds images the runtime refused to remove lately (in use by a container not the
	// agent's, or named by another tag: removal is never forced). They sit out the cycle, so
	// refused images at the head of the queue never keep the next oldest from their turn.
	Skip map[string]bool
}

// ImageCycle is a collection cycle's inputs besides the projection and the config: the
// runtime's disk as the engine asked it, and what earlier cycles left.
type ImageCycle struct {
	Free, Total uint64
	SpaceErr    bool                 // the disk question failed: collected by age only
	Deferred    int                  // cycles put off in a row because a pull was out
	Refused     map[string]time.Time // images whose removal failed (Verdict.SitOut), by id: when
}

// ImagePlan is a cycle's verdict.
type ImagePlan struct {
	Defer    bool     // a pull is out: the engine tries the cycle again shortly
	Deferred int      // cycles put off in a row, this one included: the next cycle's ImageCycle.Deferred
	Low      bool     // the runtime's disk is low: age does not count
	Forget   []string // refused images whose sit-out is over (or which are gone): no longer skipped
	Removals []Action // the removals to make now
}

// ImageDeferLimit is how many cycles in a row a low disk lets a pull out put off; ImageSitOut
// how long an image whose removal failed sits out the cycles.
const (
	ImageDeferLimit = 6
	ImageSitOut     = time.Hour
)

// planImageCycle runs a collection cycle's rules. It protects:
//   - pulls and removals never overlap: a pull may resolve any reference — a tag the core
//     never saw — to an image being removed, and find it present a moment before it goes. So
//     a cycle that finds a pull out is put off (and Gate holds pulls while removals are out) —
//     but not for ever while the disk fills: low on space, after ImageDeferLimit cycles in a
//     row it goes on, and only an image a live task names by no reference of its own (another
//     tag of the same image) could be caught in between;
//   - an image whose removal failed sits out the cycles for ImageSitOut, so the next oldest
//     are collected instead of the same failure asked for again (one another name or
//     container holds is never asked for again: its claim ends, image_released);
//   - below LowFreePercent free, unused images go regardless of age (CollectImages).
func (s *State) planImageCycle(now time.Time, cfg ImageConfig, c ImageCycle, out InFlight) ImagePlan {
	p := ImagePlan{Low: !c.SpaceErr && c.Total > 0 && c.Free*100 < c.Total*uint64(max(cfg.LowFreePercent, 0))}
	if out.Out(ActPull) {
		p.Deferred = c.Deferred + 1
		if !p.Low || p.Deferred <= ImageDeferLimit {
			p.Defer = true
			return p
		}
	}
	p.Deferred = 0
	cfg.Skip = map[string]bool{}
	for id, at := range c.Refused {
		if now.Sub(at) >= ImageSitOut || s.Images[id] == nil {
			p.Forget = append(p.Forget, id)
			continue
		}
		cfg.Skip[id] = true
	}
	slices.Sort(p.Forget)
	p.Removals = s.CollectImages(now, cfg, p.Low)
	return p
}

// ErrImageNotPulled is a removal of an image this agent did not pull.
var ErrImageNotPulled = errors.New("image removed that this agent did not pull")

// CollectImages decides which images to remove now: unused pulled images past the age (any
// age when lowSpace), the least recently used first, at most cfg.PerCycle.
func (s *State) CollectImages(now time.Time, cfg ImageConfig, lowSpace bool) []Action {
	if cfg.PerCycle <= 0 || len(s.Images) == 0 {
		return nil
	}
	ids, refs := map[string]bool{}, map[string]bool{}
	for _, t := range s.Tasks {
		for _, c := range t.Containers {
			ids[c.ImageID] = true
			refs[event.CanonicalImageRef(c.Image)] = true
		}
	}
	var out []*Image
	for _, img := range s.Images {
		if imageGuard && (ids[img.ID] || wanted(img, refs)) || !lowSpace && now.Sub(img.LastUsed) < cfg.MinAge || cfg.Skip[img.ID] {
			continue
		}
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b *Image) int {
		if c := a.LastUsed.Compare(b.LastUsed); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	var acts []Action
	for _, img := range out[:min(len(out), cfg.PerCycle)] {
		acts = append(acts, Action{Kind: ActRemoveImage, Container: img.ID, RuntimeID: img.ID, Refs: slices.Clone(img.Refs)})
	}
	return acts
}

// wanted reports whether a live task names the image by a reference it was pulled by or by its
// digest: such a task may be about to pull it (the pull would find it present).
func wanted(img *Image, refs map[string]bool) bool {
	for _, r := range img.Refs {
		if refs[event.CanonicalImageRef(r)] {
			return true
		}
	}
	if img.Digest != "" {
		for r := range refs {
			if strings.HasSuffix(r, "@"+img.Digest) {
				return true
			}
		}
	}
	return false
}

// imageRemovalFinished maps a removal's outcome to its record: removed, already gone, or
// released — the runtime kept the image for another name or a container not the agent's, so
// it is no longer the agent's to remove (asking again every cycle would change nothing). Any
// other failure records nothing; a later cycle may try again — after a sit-out when the
// runtime answered no (SitOut), at once when it did not answer.
func (s *State) imageRemovalFinished(a Action, r Result) Verdict {
	img := s.Images[a.RuntimeID]
	if img == nil {
		return Verdict{}
	}
	var e event.Event
	switch r.Kind {
	case Succeeded:
		e = &event.ImageRemoved{ImageID: img.ID, Digest: img.Digest, Refs: slices.Clone(img.Refs), Reason: "unused since " + img.LastUsed.UTC().Format(time.RFC3339)}
	case Vanished:
		e = &event.ImageRemoved{ImageID: img.ID, Digest: img.Digest, Refs: slices.Clone(img.Refs), Reason: "already gone from the runtime"}
	case Refused:
		e = &event.ImageReleased{ImageID: img.ID, Digest: img.Digest, Refs: slices.Clone(img.Refs), Reason: r.Err}
	case Failed:
		return Verdict{SitOut: true}
	default:
		return Verdict{}
	}
	return Verdict{Records: []event.Record{{Event: e}}}
}

// imagePulled notes the image a container's reference resolved to, and an image the agent
// fetched as its own.
func (s *State) imagePulled(rec event.Record, c *Container, e *event.ContainerTransitioned) {
	c.ImageID, c.ImageDigest = e.ImageID, e.ImageDigest
	if e.ImageID != "" {
		// The reference names this image now: a re-pushed tag no longer names the one it was
		// pulled as before, and no pull can resolve to that one again. Left among its refs, a
		// live task naming the tag would keep every old version from collection for ever.
		ref := event.CanonicalImageRef(c.Image)
		for id, other := range s.Images {
			if id != e.ImageID {
				other.Refs = slices.DeleteFunc(other.Refs, func(r string) bool { return event.CanonicalImageRef(r) == ref })
			}
		}
	}
	img := s.Images[e.ImageID]
	if img == nil && e.ImagePulled {
		img = &Image{ID: e.ImageID, Digest: e.ImageDigest, PulledAt: rec.Time}
		s.Images[e.ImageID] = img
	}
	if img == nil {
		return
	}
	// A name the pull did not make (it named the image before) is not the agent's to take back.
	if !e.ImageRefExisted && !slices.Contains(img.Refs, c.Image) {
		img.Refs = append(img.Refs, c.Image)
		slices.Sort(img.Refs)
	}
	img.LastUsed = rec.Time
}

// imagesReleased starts the unused age of a cleaned task's images.
func (s *State) imagesReleased(rec event.Record, t *Task) {
	for _, c := range t.Containers {
		if img := s.Images[c.ImageID]; img != nil && rec.Time.After(img.LastUsed) {
			img.LastUsed = rec.Time
		}
	}
}

// imageGone forgets a removed or released image; only one the agent pulled may be.
func (s *State) imageGone(id string) error {
	if _, ok := s.Images[id]; !ok {
		return fmt.Errorf("%w: %s", ErrImageNotPulled, id)
	}
	delete(s.Images, id)
	return nil
}
