package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// RemoveImage removes an image by id (ImageCollector), never forced: the engine refuses an
// image a container (running or stopped) uses, and one that other tags still name, and
// both come back as ErrImageInUse. Untagged parents go with it, as with `docker rmi`.
func (e *Engine) RemoveImage(ctx context.Context, imageID string) error {
	_, err := e.cli.ImageRemove(ctx, imageID, client.ImageRemoveOptions{PruneChildren: true})
	if cerrdefs.IsConflict(err) {
		return fmt.Errorf("remove image %s: %w: %v", imageID, ErrImageInUse, err)
	}
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove image %s: %w", imageID, ErrNotFound)
	}
	return e.wrap("remove image", imageID, err)
}

// ImageDiskFree is the free and total bytes of the engine's root directory (where its
// images live), as the engine names it: the agent runs on the engine's host.
func (e *Engine) ImageDiskFree(ctx context.Context) (free, total uint64, err error) {
	info, err := e.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return 0, 0, e.wrap("info", "of the engine", err)
	}
	dir := info.Info.DockerRootDir
	if dir == "" {
		return 0, 0, fmt.Errorf("docker engine at %s names no root directory", e.host)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("disk of the Docker root %s: %w", dir, err)
	}
	bs := uint64(st.Bsize)
	return st.Bavail * bs, st.Blocks * bs, nil
}
