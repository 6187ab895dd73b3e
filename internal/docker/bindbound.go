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

type bindBound struct {
	limit int64
	wait  time.Duration
	sem   *semaphore.Weighted
	mu    sync.Mutex
	taken int64 // what take gave out and give has not had back: give never hands back more (Release would panic)
}

// bindWait is how long a create waits for bind descriptors held by containers about to start.
const bindWait = 30 * time.Second

func newBindBound(limit int64, wait time.Duration) *bindBound {
	return &bindBound{limit: limit, wait: wait, sem: semaphore.NewWeighted(limit)}
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
	wctx, cancel := context.WithTimeout(ctx, b.wait)
	defer cancel()
	if err := b.sem.Acquire(wctx, int64(n)); err != nil {
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

// give hands back n descriptors (a nil bound: no bind roots, nothing was taken).
func (b *bindBound) give(n int) {
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
