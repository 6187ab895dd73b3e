package engine

import (
	"container/heap"
	"time"
)

// dueEntry is a cleanup deadline, or a time the core asked to decide a task again (a
// dependency's start_timeout_s running out, fsm.Wake). A task may have stale entries (it was
// cleaned, its deadline moved, its dependency met the condition in time): the decision at the
// deadline reads the projection, so a stale entry costs one look and nothing else.
type dueEntry struct {
	at  time.Time
	arn string
}

// dueHeap is the one scheduler for every task's deadlines: a min-heap.
type dueHeap struct{ h entries }

type entries []dueEntry

func (h entries) Len() int { return len(h) }
func (h entries) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].arn < h[j].arn
	}
	return h[i].at.Before(h[j].at)
}
func (h entries) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *entries) Push(x any)   { *h = append(*h, x.(dueEntry)) }
func (h *entries) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (d *dueHeap) push(e dueEntry) { heap.Push(&d.h, e) }
func (d *dueHeap) pop() dueEntry   { return heap.Pop(&d.h).(dueEntry) }
func (d *dueHeap) peek() (dueEntry, bool) {
	if len(d.h) == 0 {
		return dueEntry{}, false
	}
	return d.h[0], true
}
