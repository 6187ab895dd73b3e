package main

import (
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/engine"
)

// imageGCFlags configure the collection of images the agent pulled and no task uses any more.
type imageGCFlags struct {
	ImageCleanupInterval    time.Duration `default:"10m" env:"AGENTD_IMAGE_CLEANUP_INTERVAL" help:"How often unused images the agent pulled are collected. 0: never (images are kept)."`
	ImageCleanupAge         time.Duration `default:"1h" env:"AGENTD_IMAGE_CLEANUP_AGE" help:"How long an image the agent pulled must have gone unused (since its last pull, or the cleanup of the last task that used it) before it is removed."`
	ImageCleanupPerCycle    int           `default:"5" env:"AGENTD_IMAGE_CLEANUP_PER_CYCLE" help:"Images removed a cycle at most, least recently used first."`
	ImageCleanupFreePercent int           `default:"10" env:"AGENTD_IMAGE_CLEANUP_FREE_PERCENT" help:"Below this much free space (percent) on the Docker root's disk, unused images the agent pulled are removed whatever their age. 0: never."`
}

// config checks the flags and turns them into the engine's.
func (f imageGCFlags) config() (engine.ImageGC, error) {
	switch {
	case f.ImageCleanupInterval < 0:
		return engine.ImageGC{}, fmt.Errorf("--image-cleanup-interval %s: must be ≥ 0 (0 turns image collection off)", f.ImageCleanupInterval)
	case f.ImageCleanupAge < 0:
		return engine.ImageGC{}, fmt.Errorf("--image-cleanup-age %s: must be ≥ 0", f.ImageCleanupAge)
	case f.ImageCleanupPerCycle < 1:
		return engine.ImageGC{}, fmt.Errorf("--image-cleanup-per-cycle %d: must be ≥ 1", f.ImageCleanupPerCycle)
	case f.ImageCleanupFreePercent < 0 || f.ImageCleanupFreePercent > 100:
		return engine.ImageGC{}, fmt.Errorf("--image-cleanup-free-percent %d: must be 0–100", f.ImageCleanupFreePercent)
	}
	return engine.ImageGC{Interval: f.ImageCleanupInterval, MinAge: f.ImageCleanupAge,
		PerCycle: f.ImageCleanupPerCycle, LowFreePercent: f.ImageCleanupFreePercent}, nil
}
