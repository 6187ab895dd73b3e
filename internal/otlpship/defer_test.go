package otlpship

import (
	"context"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// heldWriter is a journal whose writer can be kept inside a commit: busy, as under a burst of
// appends that never pauses.
type heldWriter struct {
	j       *journal.Journal
	hold    atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func openHeldWriter(t *testing.T) *heldWriter {
	h := &heldWriter{entered: make(chan struct{}), gate: make(chan struct{})}
	j, err := journal.Open(filepath.Join(t.TempDir(), journal.FileName), journal.Options{BeforeCommit: func() error {
		if h.hold.Load() {
			h.entered <- struct{}{}
			<-h.gate
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	h.j = j
	return h
}

// busy starts a commit and keeps the writer in it until release (also at the test's end,
// before anything that waits for the journal is stopped).
func (h *heldWriter) busy(t *testing.T) (release func()) {
	h.hold.Store(true)
	go func() {
		_, _ = h.j.Append(context.Background(), event.Record{Time: t0, Task: "arn:task/burst", Event: &event.TaskCleaned{}})
	}()
	select {
	case <-h.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the writer did not start the commit within 30 s")
	}
	var once atomic.Bool
	release = func() {
		if once.CompareAndSwap(false, true) {
			h.hold.Store(false)
			close(h.gate)
		}
	}
	return release
}

// While the commits do not pause the shipper reads nothing (its CPU is the appenders'); once
// they pause it ships at once, long before MaxDefer.
func TestABurstOfCommitsIsShippedAfterIt(t *testing.T) {
	h := openHeldWriter(t)
	appendTransitions(t, h.j, "arn:task/1", 600, "")
	release := h.busy(t)
	rcv := newReceiver(t, nil)
	r := ship(t, h.j, rcv.endpoint(), func(c *Config) { c.MaxDefer = time.Hour })
	t.Cleanup(release) // runs before the shipper is stopped: its position write waits for the writer
	if n := len(rcv.all()); n != 0 {
		t.Fatalf("%d requests sent while a commit was under way", n)
	}
	release()
	r.settled(t, 601)
}

// A writer that never pauses delays shipping by MaxDefer, not for good: the first batch goes
// MaxDefer after the shipper found the writer busy, while it still is.
func TestCommitsThatNeverPauseAreShippedAfterMaxDefer(t *testing.T) {
	const maxDefer = 300 * time.Millisecond
	h := openHeldWriter(t)
	appendTransitions(t, h.j, "arn:task/1", 600, "")
	release := h.busy(t)
	var first atomic.Int64
	rcv := newReceiver(t, func(n int, _ http.ResponseWriter) bool {
		first.CompareAndSwap(0, time.Now().UnixNano())
		return false
	})
	start := time.Now()
	ship(t, h.j, rcv.endpoint(), func(c *Config) { c.MaxDefer = maxDefer })
	t.Cleanup(release) // before the shipper is stopped: its position write waits for the writer
	rcv.waitFor("a batch while the writer is busy", func() bool { return len(rcv.accepted()) > 0 })
	if waited := time.Unix(0, first.Load()).Sub(start); waited < maxDefer {
		t.Fatalf("the first batch went %v after the shipper started, with the writer busy: want at least MaxDefer (%v)", waited, maxDefer)
	}
	if !h.hold.Load() {
		t.Fatal("the writer was let go before the batch")
	}
}
