package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/event"
)

// PullWith makes the image present as the container's pull_policy says (PROTOCOL.md §4):
// "always" pulls even an image the engine has (a newer one under the same tag), "never"
// only checks that it is there, "if-not-present" (or empty) is Pull.
func (e *Engine) PullWith(ctx context.Context, image, policy string) error {
	switch policy {
	case event.PullAlways:
		resp, err := e.cli.ImagePull(ctx, image, client.ImagePullOptions{})
		if err != nil {
			return e.wrap("pull", image, err)
		}
		defer resp.Close()
		if err := resp.Wait(ctx); err != nil {
			return fmt.Errorf("pull %s (pull_policy always): %w", image, err)
		}
		return nil
	case event.PullNever:
		if _, err := e.cli.ImageInspect(ctx, image); err != nil {
			if cerrdefs.IsNotFound(err) {
				return fmt.Errorf("pull %s: not present, and pull_policy is never", image)
			}
			return e.wrap("pull", image, err)
		}
		return nil
	}
	return e.Pull(ctx, image)
}

// PullWith in the simulated runtime: every image is present (unless its name says
// fail-pull), so only that failure differs by policy — never does not pull, so never fails.
func (s *Sim) PullWith(ctx context.Context, image, policy string) error {
	if policy == event.PullNever {
		return nil
	}
	return s.Pull(ctx, image)
}
