package journal_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// A reader that waits for the writer to pause (the OTLP shipper) is held while a commit is
// under way and let go once appends have stopped; a read-only or closed journal never holds it.
func TestIdleWaitsForTheAppendsToPause(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	entered, gate := make(chan struct{}), make(chan struct{})
	var hold bool
	j, err := journal.Open(path, journal.Options{BeforeCommit: func() error {
		if hold { // read and written by the writer alone, before the test lets it go
			entered <- struct{}{}
			<-gate
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	isClosed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	if !isClosed(j.Idle()) {
		t.Fatal("a journal nobody appends to is not idle")
	}
	ctx := context.Background()
	if _, err := j.Append(ctx, transition("task/a", "app", event.StatusNone, event.StatusPulled, 1)); err != nil {
		t.Fatal(err)
	}
	hold = true // the writer sleeps (no commit runs) until the next append: no race
	appended := make(chan error, 1)
	go func() {
		_, err := j.Append(ctx, transition("task/a", "app", event.StatusPulled, event.StatusRunning, 2))
		appended <- err
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the writer did not start the commit within 30 s")
	}
	busy := j.Idle()
	if isClosed(busy) {
		t.Fatal("Idle is closed while a commit is under way")
	}
	close(gate)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	select {
	case <-busy:
	case <-time.After(30 * time.Second):
		t.Fatal("Idle still open 30 s after the last append")
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if !isClosed(j.Idle()) {
		t.Fatal("a closed journal is not idle")
	}
	ro, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if !isClosed(ro.Idle()) {
		t.Fatal("a read-only journal is not idle")
	}
}
