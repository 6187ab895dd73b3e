package docker

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestBindNumbersKeptAfterTheStartAreBounded (issue 41): a bind volume's descriptor number is
// kept, on the placeholder, from its container's start until the volume is removed
// (bindletgo.go); those count with the sources held against the volume bound (half as many
// again as the sources), and a create past it fails at once, alone, naming the bound — it does
// not wait, as only removals, hours later, make room.
func TestBindNumbersKeptAfterTheStartAreBounded(t *testing.T) {
	b := newBindBound(2, time.Minute) // 2 sources held at once, 3 numbers kept
	ctx := context.Background()
	must(t, b.take(ctx, 2))
	b.started(2) // both started: their sources let go, their numbers kept
	must(t, b.take(ctx, 1))
	start := time.Now()
	err := b.take(ctx, 1)
	if err == nil || !strings.Contains(err.Error(), "3 of the bound of 3 are held by bind volumes of containers not yet removed") {
		t.Fatalf("a fourth bind volume with three kept: %v; want refused naming the bound", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("the create past the bound waited %v for removals", waited)
	}
	b.removed(1) // a started container removed
	must(t, b.take(ctx, 1))
	b.give(1) // made and never started: both its places back
	b.give(1)
	b.removed(2)
	must(t, b.take(ctx, 2))
}
