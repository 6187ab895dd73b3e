package simruntime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// The simulated runtime's images and the registries they come from. An image is absent until
// pulled (or Preloaded, as an operator's image the agent did not pull); each tag of the
// simulated registries has a generation, and RepushImage makes a new one (a new digest, a
// new image id), which "always" picks up and "if-not-present" does not. Pulls can be slow
// (they take time through the sleep hook, simulated time in the simulation), fail
// transiently (retried, PullTries in all) or for good, as SetPullFaults says; an image
// whose name contains fail-pull is unknown to every registry. Everything is a function of the
// calls made: no wall clock (unless the default sleep is used), no map order.

// danglingRef keys an image no tag names any more.
const danglingRef = "<none>@"

// PullTries is how many times the simulated runtime tries a pull that fails transiently.
const PullTries = 4

// PullFault is what SetPullFaults makes of one try of a pull.
type PullFault struct {
	// Took is how long the try takes before it succeeds or fails.
	Took time.Duration
	// Transient fails the try as a 503 or a stalled transfer would: worth another try.
	Transient bool
	// Permanent fails the pull at once with this cause ("unauthorized", "manifest unknown").
	Permanent string
}

// heldImage is an image the simulated engine holds.
type heldImage struct {
	Ref    string `json:"ref"` // normalized reference, the key
	ID     string `json:"id"`
	Digest string `json:"digest"`
	Pulled bool   `json:"pulled,omitempty"` // fetched by a pull (not preloaded)
	Size   uint64 `json:"size"`
}

// registries is the registries' side: what the simulated world can change.
type registries struct {
	generation  map[string]int    // by normalized reference; absent: 1
	alias       map[string]string // a reference served as another's image (SetAlias)
	faults      func(image string, try int) PullFault
	sleep       func(ctx context.Context, d time.Duration) error
	policy      string
	total, used uint64 // the disk of the images: its size, and what is not images
}

// SetPullFaults makes every later try of a pull (try counts from 1 within one PullImage)
// behave as f says; nil turns them off.
func (s *Runtime) SetPullFaults(f func(image string, try int) PullFault) {
	s.mu.Lock()
	s.reg.faults = f
	s.mu.Unlock()
}

// SetSleep replaces how the simulated runtime waits while a pull takes time or backs off
// (default: the wall clock, cut short by the context). The simulation advances its virtual
// clock instead.
func (s *Runtime) SetSleep(sleep func(ctx context.Context, d time.Duration) error) {
	s.mu.Lock()
	s.reg.sleep = sleep
	s.mu.Unlock()
}

// SetDefaultPullPolicy is the policy for a container that names none (--pull-policy).
func (s *Runtime) SetDefaultPullPolicy(policy string) error {
	if err := runtime.CheckPullPolicy(policy); err != nil {
		return fmt.Errorf("--pull-policy: %w", err)
	}
	s.mu.Lock()
	s.reg.policy = policy
	s.mu.Unlock()
	return nil
}

// SetDisk sets the simulated disk the images live on: total bytes, and bytes used by other
// things than images (default 100 GiB, 20 GiB).
func (s *Runtime) SetDisk(total, other uint64) {
	s.mu.Lock()
	s.reg.total, s.reg.used = total, other
	s.mu.Unlock()
}

// RepushImage pushes a new image under the reference's tag to its simulated registry.
func (s *Runtime) RepushImage(image string) error {
	ref, err := imageRef(image)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reg.generation == nil {
		s.reg.generation = map[string]int{}
	}
	s.reg.generation[ref] = s.gen(ref) + 1
	return nil
}

// SetAlias makes the registries serve under ref the very image they serve under target (the
// same id and digest): a second tag of one build, or a digest an operator pinned.
func (s *Runtime) SetAlias(ref, target string) error {
	r, err := imageRef(ref)
	if err != nil {
		return err
	}
	tg, err := imageRef(target)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reg.alias == nil {
		s.reg.alias = map[string]string{}
	}
	s.reg.alias[r] = tg
	return nil
}

// Tag names the image src names by dst too, as `docker tag` (an operator's tag): the image is
// then no longer the agent's alone to delete. runtime.ErrNotFound when src names no image.
func (s *Runtime) Tag(src, dst string) (runtime.PullOutcome, error) {
	sr, err := imageRef(src)
	if err != nil {
		return runtime.PullOutcome{}, err
	}
	dr, err := imageRef(dst)
	if err != nil {
		return runtime.PullOutcome{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	img, ok := s.state.Images[sr]
	if !ok {
		return runtime.PullOutcome{}, fmt.Errorf("tag %s: %w", src, runtime.ErrNotFound)
	}
	d := *img
	d.Ref = dr
	return runtime.PullOutcome{Digest: d.Digest, ImageID: d.ID}, s.putImage(&d)
}

// Preload puts an image on the simulated engine as an operator would (not pulled by the
// agent: image GC must leave it).
func (s *Runtime) Preload(image string) (runtime.PullOutcome, error) {
	ref, err := imageRef(image)
	if err != nil {
		return runtime.PullOutcome{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	img := s.registryImage(ref)
	if err := s.putImage(img); err != nil {
		return runtime.PullOutcome{}, err
	}
	return runtime.PullOutcome{Digest: img.Digest, ImageID: img.ID}, nil
}

// Images lists the images the simulated engine holds, by reference.
func (s *Runtime) Images() []runtime.PullOutcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]runtime.PullOutcome, 0, len(s.state.Images))
	for _, ref := range sortedKeys(s.state.Images) {
		img := s.state.Images[ref]
		out = append(out, runtime.PullOutcome{Digest: img.Digest, ImageID: img.ID, Pulled: img.Pulled})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// imageRef is the key of an image: its normalized reference, tagged latest when it names no
// tag or digest (as Docker reads it).
func imageRef(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("%q is not an image reference: %v", image, err)
	}
	return reference.TagNameOnly(named).String(), nil
}

func (s *Runtime) gen(ref string) int {
	if g, ok := s.reg.generation[ref]; ok {
		return g
	}
	return 1
}

func digestOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// registryImage is what the registry holds under ref now.
func (s *Runtime) registryImage(ref string) *heldImage {
	src := ref
	if a, ok := s.reg.alias[ref]; ok {
		src = a
	}
	g := fmt.Sprint(s.gen(src))
	h := fnv.New32a()
	h.Write([]byte(src))
	return &heldImage{Ref: ref, ID: digestOf("id", src, g), Digest: digestOf("digest", src, g), Size: uint64(16+h.Sum32()%240) << 20}
}

// namedBy lists the keys under which the engine holds an image id (its tags, and its
// dangling key when no tag names it), sorted.
func (s *Runtime) namedBy(id string) []string {
	var out []string
	for _, r := range sortedKeys(s.state.Images) {
		if s.state.Images[r].ID == id {
			out = append(out, r)
		}
	}
	return out
}

func (s *Runtime) putImage(img *heldImage) error {
	if s.state.Images == nil {
		s.state.Images = map[string]*heldImage{}
	}
	if old, ok := s.state.Images[img.Ref]; ok && old.ID != img.ID && len(s.namedBy(old.ID)) == 1 {
		// As Docker does, the image the tag named before stays, untagged, until removed:
		// a container made from it still runs it. (Named otherwise too, it keeps that name.)
		d := *old
		d.Ref = danglingRef + old.ID
		s.state.Images[d.Ref] = &d
		if err := s.save(fileOp{PutImage: &d}); err != nil {
			return err
		}
	}
	s.state.Images[img.Ref] = img
	return s.save(fileOp{PutImage: img})
}

// PullImage makes the image present as policy says (runtime.Runtime), as the Docker runtime
// does: see the package's comment on images for what can happen.
func (s *Runtime) PullImage(ctx context.Context, image, policy string) (runtime.PullOutcome, error) {
	if err := runtime.CheckPullPolicy(policy); err != nil {
		return runtime.PullOutcome{}, fmt.Errorf("pull %s: %w", image, err)
	}
	ref, err := imageRef(image)
	if err != nil {
		return runtime.PullOutcome{}, fmt.Errorf("pull %s: bad reference: %v", image, err)
	}
	s.mu.Lock()
	if policy == "" {
		policy = s.reg.policy
	}
	cached, present := s.state.Images[ref]
	held := map[string]bool{} // the ids the engine holds before the pull
	for _, img := range s.state.Images {
		held[img.ID] = true
	}
	faults, sleep := s.reg.faults, s.reg.sleep
	s.mu.Unlock()
	if sleep == nil {
		sleep = wallSleep
	}
	var out runtime.PullOutcome
	if present {
		out = runtime.PullOutcome{Digest: cached.Digest, ImageID: cached.ID, RefExisted: true}
	}
	switch {
	case policy == event.PullNever && !present:
		return runtime.PullOutcome{}, fmt.Errorf("pull %s: not present, and pull_policy is never", image)
	case policy == event.PullNever, policy != event.PullAlways && present:
		return out, nil
	}
	if err := failsAt(image, "pull"); err != nil {
		return runtime.PullOutcome{}, fmt.Errorf("pull %s: manifest unknown: simulated failure (image name contains fail-pull)", image)
	}
	wait := time.Second
tries:
	for try := 1; ; try++ {
		var f PullFault
		if faults != nil {
			f = faults(image, try)
		}
		if err := sleep(ctx, f.Took); err != nil {
			return runtime.PullOutcome{}, fmt.Errorf("pull %s: %w", image, err)
		}
		switch {
		case f.Permanent != "":
			return runtime.PullOutcome{}, fmt.Errorf("pull %s: %s (simulated)", image, f.Permanent)
		case f.Transient && try < PullTries:
			if err := sleep(ctx, wait); err != nil {
				return runtime.PullOutcome{}, fmt.Errorf("pull %s: %w (after %d tries)", image, err, try)
			}
			wait *= 2
			continue
		case f.Transient && present && policy == event.PullAlways:
			out.Note = fmt.Sprintf("pull of %s failed transiently (simulated 503, %d tries); using the cached image %s", image, try, out.ImageID)
			return out, nil
		case f.Transient:
			return runtime.PullOutcome{}, fmt.Errorf("pull %s: failed transiently %d times, the last: simulated 503 Service Unavailable", image, try)
		}
		break tries
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	img := s.registryImage(ref)
	if cur, ok := s.state.Images[ref]; ok && cur.ID == img.ID {
		return runtime.PullOutcome{Digest: cur.Digest, ImageID: cur.ID, RefExisted: true}, nil // up to date
	}
	// As Docker: the agent's only if the engine held no image of this id before, under any
	// name (an operator's pinned digest of the same build stays the operator's).
	img.Pulled = !held[img.ID]
	if err := s.putImage(img); err != nil {
		return runtime.PullOutcome{}, fmt.Errorf("pull %s: %w", image, err)
	}
	return runtime.PullOutcome{Digest: img.Digest, ImageID: img.ID, Pulled: img.Pulled}, nil
}

func wallSleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RemoveImage takes back the agent's names of an image (runtime.Runtime), as the Docker
// runtime does on Docker: each of refs that still names the image is untagged, refused
// (runtime.ErrImageInUse) when it is the image's last name and a container of any agent, running or
// not, was created from it; the image goes with its last name; one still named otherwise is
// kept (runtime.ErrImageInUse, naming what holds it); one left with no name but its dangling key is
// removed unless a container uses it.
func (s *Runtime) RemoveImage(ctx context.Context, imageID string, refs []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	user := func() *container {
		for _, id := range sortedKeys(s.state.Containers) {
			c := s.state.Containers[id]
			uses := c.ImageID == imageID
			if c.ImageID == "" {
				cref, _ := imageRef(c.Image)
				uses = s.state.Images[cref] != nil && s.state.Images[cref].ID == imageID
			}
			if uses {
				return c
			}
		}
		return nil
	}
	untagged := false
	for _, r := range refs {
		ref, err := imageRef(r)
		if err != nil {
			continue
		}
		if img := s.state.Images[ref]; img == nil || img.ID != imageID {
			continue // gone, or someone else's now
		}
		if len(s.namedBy(imageID)) == 1 {
			if c := user(); c != nil {
				return fmt.Errorf("remove image %s: untag %s: %w: container %s uses it", imageID, ref, runtime.ErrImageInUse, c.ID)
			}
		}
		if err := s.untag(ref, imageID); err != nil {
			return err
		}
		untagged = true
	}
	names := s.namedBy(imageID)
	switch {
	case len(names) == 0 && untagged:
		return nil // the last name took the image with it
	case len(names) == 0:
		return fmt.Errorf("remove image %s: %w", imageID, runtime.ErrNotFound)
	case names[0] != danglingRef+imageID || len(names) > 1:
		return fmt.Errorf("remove image %s: %w: still named %s", imageID, runtime.ErrImageInUse, strings.Join(slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, danglingRef) }), ", "))
	}
	if c := user(); c != nil {
		return fmt.Errorf("remove image %s: %w: container %s uses it", imageID, runtime.ErrImageInUse, c.ID)
	}
	delete(s.state.Images, names[0])
	return s.save(fileOp{DelImage: names[0]})
}

// untag removes one name of an image, as Docker does: when the name is a tag and no other tag
// of its repository names the image, the digest names of that repository go with it (Docker
// reads them as belonging to the tag) — so an operator's REG/app@sha256:… goes when the
// agent's REG/app:task of the same image is taken back.
func (s *Runtime) untag(ref, imageID string) error {
	drop := []string{ref}
	if named, err := reference.ParseNormalizedNamed(ref); err == nil {
		if _, digested := named.(reference.Digested); !digested {
			var digests []string
			tagged := false
			for _, r := range s.namedBy(imageID) {
				other, err := reference.ParseNormalizedNamed(r)
				if err != nil || r == ref || other.Name() != named.Name() {
					continue
				}
				if _, d := other.(reference.Digested); d {
					digests = append(digests, r)
				} else {
					tagged = true
				}
			}
			if !tagged {
				drop = append(drop, digests...)
			}
		}
	}
	for _, r := range drop {
		delete(s.state.Images, r)
		if err := s.save(fileOp{DelImage: r}); err != nil {
			return err
		}
	}
	return nil
}

// ImageDiskFree is the simulated disk of the images (runtime.Runtime): what SetDisk set,
// less the images held.
func (s *Runtime) ImageDiskFree(ctx context.Context) (free, total uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	total, used := s.reg.total, s.reg.used
	if total == 0 {
		total, used = 100<<30, 20<<30
	}
	for _, img := range s.state.Images {
		used += img.Size
	}
	if used >= total {
		return 0, total, nil
	}
	return total - used, total, nil
}

// imageIDOf is the id of the image a container is created from (empty: not present).
func (s *Runtime) imageIDOf(image string) string {
	ref, err := imageRef(image)
	if err != nil {
		return ""
	}
	if img, ok := s.state.Images[ref]; ok {
		return img.ID
	}
	return ""
}
