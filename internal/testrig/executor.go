package testrig

// The engine's work (engine.Executor) held until the test runs it: each call is due a latency
// after it was asked for (none without Latency), and runs in the order due, ties in the order
// asked — so a seeded latency replays the same interleaving.

import (
	"container/heap"
	"time"
)

// Executor holds the work given to Go. T is what work returns (engine.Input).
type Executor[T any] struct {
	// Clock and Latency, when set, make each call due Latency() after the clock's time when it
	// was asked for; without them every call is due at once.
	Clock   *Clock
	Latency func() time.Duration
	queue   workQueue[T]
	n       int
}

// Go holds f until it is due and the test runs it.
func (x *Executor[T]) Go(f func() T) {
	var at time.Time
	if x.Clock != nil {
		at = x.Clock.Now()
	}
	if x.Latency != nil {
		at = at.Add(x.Latency())
	}
	x.n++
	heap.Push(&x.queue, work[T]{at: at, n: x.n, run: f})
}

// Next takes the work due first, if it is due (by the clock's time; without a clock, any is);
// nil when there is none.
func (x *Executor[T]) Next() func() T {
	if len(x.queue) == 0 || x.Clock != nil && x.queue[0].at.After(x.Clock.Now()) {
		return nil
	}
	return heap.Pop(&x.queue).(work[T]).run
}

// Due is when the work due first is, and whether there is any.
func (x *Executor[T]) Due() (time.Time, bool) {
	if len(x.queue) == 0 {
		return time.Time{}, false
	}
	return x.queue[0].at, true
}

// Drop forgets every call held, as a crash does the calls in flight.
func (x *Executor[T]) Drop() { x.queue = nil }

// Len is how much work is held.
func (x *Executor[T]) Len() int { return len(x.queue) }

type work[T any] struct {
	at  time.Time
	n   int
	run func() T
}

type workQueue[T any] []work[T]

func (q workQueue[T]) Len() int { return len(q) }
func (q workQueue[T]) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].n < q[j].n
}
func (q workQueue[T]) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *workQueue[T]) Push(x any)   { *q = append(*q, x.(work[T])) }
func (q *workQueue[T]) Pop() any {
	o := *q
	x := o[len(o)-1]
	*q = o[:len(o)-1]
	return x
}
