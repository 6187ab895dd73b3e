package docker

import "context"

// PullWith makes the image present as the container's pull_policy says (PolicyPuller):
// PullImage without its outcome.
func (e *Engine) PullWith(ctx context.Context, image, policy string) error {
	_, err := e.PullImage(ctx, image, policy)
	return err
}
