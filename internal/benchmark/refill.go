package benchmark

import (
	"sync"
	"time"
)

// refillFloor is what a group commit with one outstanding append per producer cannot avoid
// between two commits, measured without any I/O: the writer answers every producer of the
// last commit and waits until each is queued again. It mirrors the journal's hand-off (a
// mutex-guarded queue, one wake-up for the writer when the batch is complete, a buffered
// answer channel per append) and nothing else: no encoding, no bbolt, no fsync. Between
// hand-offs the writer stays busy for commit, as it does in its commit, so the other
// goroutines find the machine as they find it after a real one.
//
// With every producer waiting on its own append, no commit can start before they are back:
// a journal whose commits take c can carry at most c/(c+floor) of the ceiling, where one
// goroutine commits back to back. The ratio row is judged against the target all the same;
// this row says how much of the gap is the scheduler's.
func refillFloor(producers int, commit time.Duration, cycles int) time.Duration {
	var mu sync.Mutex
	var queued []chan error
	target := 0
	wake := make(chan struct{}, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				done := make(chan error, 1)
				mu.Lock()
				queued = append(queued, done)
				if target > 0 && len(queued) >= target {
					target = 0
					select {
					case wake <- struct{}{}:
					default:
					}
				}
				mu.Unlock()
				select {
				case <-done:
				case <-stop:
					return
				}
			}
		}()
	}
	waitAll := func() []chan error {
		mu.Lock()
		if len(queued) < producers {
			target = producers
			mu.Unlock()
			<-wake
			mu.Lock()
		}
		batch := queued
		queued = nil
		mu.Unlock()
		return batch
	}
	warmup := cycles / 10
	var total time.Duration
	batch := waitAll()
	for c := 0; c < cycles+warmup; c++ {
		for end := time.Now().Add(commit); time.Now().Before(end); {
		}
		start := time.Now()
		for _, d := range batch {
			d <- nil
		}
		batch = waitAll()
		if c >= warmup {
			total += time.Since(start)
		}
	}
	close(stop)
	wg.Wait()
	return total / time.Duration(cycles)
}
