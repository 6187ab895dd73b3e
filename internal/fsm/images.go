package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"

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
	MinAge   time.Duration // unused at least this long before it is removed
	PerCycle int           // at most this many removals a cycle
	// Skip holds images the runtime refused to remove lately (in use by a container not the
	// agent's, or named by another tag: removal is never forced). They sit out the cycle, so
	// refused images at the head of the queue never keep the next oldest from their turn.
	Skip map[string]bool
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
			refs[canonicalRef(c.Image)] = true
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
		if refs[canonicalRef(r)] {
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

// canonicalRef is a reference in the one spelling the engine resolves it by ("web" and
// "docker.io/library/web:latest" name the same image), so a task naming an image by another
// spelling than the one it was pulled by still keeps it; a reference that does not parse is
// compared as written. Pure parsing: no registry is asked.
func canonicalRef(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}

// imageRemovalFinished maps a removal's outcome to its record: removed, already gone, or
// released — the runtime kept the image for another name or a container not the agent's, so
// it is no longer the agent's to remove (asking again every cycle would change nothing). Any
// other failure records nothing; a later cycle may try again.
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
		ref := canonicalRef(c.Image)
		for id, other := range s.Images {
			if id != e.ImageID {
				other.Refs = slices.DeleteFunc(other.Refs, func(r string) bool { return canonicalRef(r) == ref })
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
