package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"
)

// The bound on bind-source descriptors (issue 41). Each bind mount holds one descriptor from
// its container's create until the container has started (engine_binds.go); containers made
// faster than they start, or made and never started, would otherwise take descriptors until
// the agent has none left for anything. The invariant kept here: at most limit bind
// descriptors are open at once; a create that needs more waits for others' starts, at most
// wait, and then fails alone — its error names the bound — while every other task goes on.
// (golang.org/x/sync/semaphore: a create takes all its descriptors at once, first come first
// served, so two creates each holding part of what they need never wait on each other.)
//
// A started container's bind volume keeps its descriptor number, naming an inert placeholder,
// until the volume is removed (bindletgo.go): those are bounded too, at half as many again as
// the sources (three quarters of the open-file limit in all); a create past that fails at once,
// alone, naming the bound — only removals, hours later, would make room.

type bindBound struct {
	limit int64
	wait  time.Duration
	sem   *semaphore.Weighted
	mu    sync.Mutex
	taken int64 // what take gave out and give has not had back: give never hands back more (Release would panic)
	// volumes are the bind volumes whose descriptor numbers are held (source or placeholder),
	// at most volumeLimit.
	volumes, volumeLimit int64
}

// bindWait is how long a create waits for bind descriptors held by containers about to start.
const bindWait = 30 * time.Second

func newBindBound(limit int64, wait time.Duration) *bindBound {
	return &bindBound{limit: limit, wait: wait, sem: semaphore.NewWeighted(limit), volumeLimit: limit + (limit+1)/2}
}

// defaultBindBound is half the agent's open-file limit: the other half stays for the journal,
// the engine's and the control plane's connections, and the API.
func defaultBindBound() *bindBound {
	limit := int64(512)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur != unix.RLIM_INFINITY {
		limit = max(1, int64(rl.Cur/2))
	}
	return newBindBound(limit, bindWait)
}

// take reserves n descriptors, waiting up to wait for containers holding theirs to start.
func (b *bindBound) take(ctx context.Context, n int) error {
	if int64(n) > b.limit {
		return fmt.Errorf("%d bind mounts need as many descriptors, more than the bound of %d bind descriptors open at once (half the agent's open-file limit); not created", n, b.limit)
	}
	b.mu.Lock()
	if b.volumes+int64(n) > b.volumeLimit {
		b.mu.Unlock()
		return fmt.Errorf("%d bind mounts need as many descriptors: %d of the bound of %d are held by bind volumes of containers not yet removed (each keeps its descriptor number until then, so no later mount of it reaches another directory); not created", n, b.volumes, b.volumeLimit)
	}
	b.volumes += int64(n)
	b.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, b.wait)
	defer cancel()
	if err := b.sem.Acquire(wctx, int64(n)); err != nil {
		b.removed(n)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("waited %s for %d bind descriptors: all %d of the bound on bind descriptors open at once (half the agent's open-file limit) are held by containers created and not yet started; not created", b.wait, n, b.limit)
	}
	b.mu.Lock()
	b.taken += int64(n)
	b.mu.Unlock()
	return nil
}

// give hands back n descriptors never let go: their sources' places and their numbers' (a nil
// bound: no bind roots, nothing was taken).
func (b *bindBound) give(n int) {
	b.started(n)
	b.removed(n)
}

// started hands back the places of n sources let go; their numbers stay taken.
func (b *bindBound) started(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	back := min(int64(n), b.taken)
	b.taken -= back
	b.mu.Unlock()
	if back > 0 {
		b.sem.Release(back)
	}
}

// removed hands back n descriptor numbers (their volumes removed).
func (b *bindBound) removed(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.volumes -= min(int64(n), b.volumes)
	b.mu.Unlock()
}
