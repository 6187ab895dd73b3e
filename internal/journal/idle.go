package journal

import "time"

// The writer tells a reader that can wait (the OTLP shipper) when appends pause, so that its
// reading and encoding take the CPU after a burst of commits rather than from the appenders
// during it. Idle never holds back a commit: the writer only closes or replaces a channel
// when it goes to sleep or wakes, and a reader's waiting costs it nothing.

// idleAfter is how long the writer must have waited with nothing queued to count as idle:
// between the commits of a burst its queue is empty for the microseconds its appenders take
// to come back, and that is not a pause.
const idleAfter = 2 * time.Millisecond

// Idle returns a channel that is closed while the writer is idle: nothing has been queued for
// idleAfter (or the journal is read-only or closed). A channel returned while it is busy is
// closed when it next goes idle.
func (j *Journal) Idle() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.idle
}

// waitForAppends blocks the writer until a request is queued or the journal stops, marking
// it idle once it has waited idleAfter.
func (j *Journal) waitForAppends() {
	if j.q.len() == 0 {
		j.q.waitFor(1, idleAfter, j.stop)
	}
	if j.q.len() == 0 {
		j.setIdle(true)
		j.q.waitFor(1, 0, j.stop)
	}
	if j.q.len() > 0 {
		j.setIdle(false)
	}
}

func (j *Journal) setIdle(idle bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if idle == j.isIdle {
		return
	}
	if j.isIdle = idle; idle {
		close(j.idle)
	} else {
		j.idle = make(chan struct{})
	}
}
