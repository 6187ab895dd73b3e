package docker

import (
	"context"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/runtime"
)

// RemoveImage takes back the agent's names of an image it pulled (runtime.Runtime). Each of
// refs that still names the image is removed by that name — an untag, never forced: the engine
// deletes the image only with its last name, and refuses (409) to untag the last name of an
// image a container uses. A name that names another image now (moved by someone else) is left
// alone. What stays decides the answer: the image gone is success; an image still named by a
// tag that is not the agent's, or used by a container, is ErrImageInUse saying which (the
// agent's claim ends); an image no tag names any more (the agent's tag moved on to a re-push)
// is removed by id, never forced, untagged parents with it as with `docker rmi`. An image
// someone else pulled, tagged or loaded after the agent fetched it (imageclaims.go) is not
// touched: ErrImageInUse, saying who and when.
func (e *Engine) RemoveImage(ctx context.Context, imageID string, refs []string) error {
	// Before any untag: the agent's last tag of a repository takes that repository's digest
	// references with it, so one someone pinned after the agent's pull would go too.
	ahead := time.Duration(0)
	if kind, _ := e.knownKind(); kind != kindDocker {
		ahead = podmanAhead // Podman's, or an engine not named yet: either way read it all
	}
	if err := e.claims.catchUp(ctx, e.cli, ahead); err != nil {
		return e.wrap("remove image "+imageID, "(whether someone else pulled it since)", err)
	}
	why, err := e.claims.othersClaim(imageID, refs, func(ref string) (string, error) {
		res, err := e.cli.ImageInspect(ctx, ref)
		return res.ID, e.wrap("inspect image", ref, err)
	})
	if err != nil {
		return fmt.Errorf("remove image %s: %w", imageID, err)
	}
	if why != "" {
		return fmt.Errorf("remove image %s: %w: %s", imageID, runtime.ErrImageInUse, why)
	}
	untagged := false
	for _, ref := range refs {
		res, err := e.cli.ImageInspect(ctx, ref)
		if cerrdefs.IsNotFound(err) || err == nil && res.ID != imageID {
			continue // gone, or someone else's now
		}
		if err != nil {
			return e.wrap("remove image", imageID, err)
		}
		_, err = e.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true})
		switch {
		case cerrdefs.IsConflict(err):
			return fmt.Errorf("remove image %s: untag %s: %w: %v", imageID, ref, runtime.ErrImageInUse, err)
		case cerrdefs.IsNotFound(err):
		case err != nil:
			return e.wrap("remove image", imageID, err)
		default:
			untagged = true
		}
	}
	res, err := e.cli.ImageInspect(ctx, imageID)
	switch {
	case cerrdefs.IsNotFound(err) && untagged:
		return nil // the last name took the image with it
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("remove image %s: %w", imageID, runtime.ErrNotFound)
	case err != nil:
		return e.wrap("remove image", imageID, err)
	case len(res.RepoTags) > 0:
		return fmt.Errorf("remove image %s: %w: still named %s", imageID, runtime.ErrImageInUse, strings.Join(res.RepoTags, ", "))
	}
	_, err = e.cli.ImageRemove(ctx, imageID, client.ImageRemoveOptions{PruneChildren: true})
	if cerrdefs.IsConflict(err) {
		return fmt.Errorf("remove image %s: %w: %v", imageID, runtime.ErrImageInUse, err)
	}
	if cerrdefs.IsNotFound(err) {
		return nil // gone between the look and the removal: removed all the same
	}
	return e.wrap("remove image", imageID, err)
}

// ImageDiskFree is the free and total bytes of the engine's root directory (where its
// images live), as the engine names it: the agent runs on the engine's host.
func (e *Engine) ImageDiskFree(ctx context.Context) (free, total uint64, err error) {
	dir, err := e.dataRoot(ctx)
	if err != nil {
		return 0, 0, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("disk of the Docker root %s: %w", dir, err)
	}
	bs := uint64(st.Bsize)
	return st.Bavail * bs, st.Blocks * bs, nil
}
