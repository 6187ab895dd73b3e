package docker

import "context"

// TEMPORARY (lead): the images helper's contract, replaced at merge.

type PullOutcome struct {
	Digest  string
	ImageID string
	Pulled  bool
	Note    string
}

type ImagePuller interface {
	PullImage(ctx context.Context, image, policy string) (PullOutcome, error)
}

type ImageCollector interface {
	RemoveImage(ctx context.Context, imageID string) error
	ImageDiskFree(ctx context.Context) (free, total uint64, err error)
}
