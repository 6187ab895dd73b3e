package main

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/benchmark"
)

// gone says whether no process pid exists any more — neither running nor a zombie left unreaped.
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// The control plane bench measures a child control plane with 50 agents' polls held: each
// held poll costs it its connection's goroutines (HTTP/1.1: the connection's and its
// background read, 2) and some memory of its own, and the child is gone once the bench returns.
func TestControlPlaneBenchMeasuresTheChildAndStopsIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := benchmark.ControlPlane(ctx, benchmark.ControlPlaneOptions{Server: benchBinary(t), Agents: 50, Tasks: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.PID == 0 || !gone(res.PID) {
		t.Fatalf("the control plane (pid %d) outlived its bench", res.PID)
	}
	if res.GoroutinesPerAgent < 1.5 || res.GoroutinesPerAgent > 3 || res.HeldGoroutines < res.FreshGoroutines+100 {
		t.Errorf("%.2f goroutines per agent (%d fresh, %d held), want about 2 for each held poll", res.GoroutinesPerAgent, res.FreshGoroutines, res.HeldGoroutines)
	}
	if res.FreshRSSKB <= 0 || res.HeldRSSKB <= res.FreshRSSKB || res.PeakRSSKB < res.HeldRSSKB {
		t.Errorf("RSS fresh %d KB, held %d KB, peak %d KB: want fresh > 0 < held ≤ peak", res.FreshRSSKB, res.HeldRSSKB, res.PeakRSSKB)
	}
	if res.RSSPerAgentKB <= 0 || res.RSSPerAgentKB > 1024 || res.HeapPerAgentKB <= 0 {
		t.Errorf("%.1f KB RSS (%.1f KB heap) per agent, want some and under 1 MB", res.RSSPerAgentKB, res.HeapPerAgentKB)
	}
}

// Whatever breaks the bench once the control plane serves — the run cancelled, the child
// killed — the bench returns an error, promptly, and leaves no process behind; a binary that
// never serves is named as such.
func TestControlPlaneBenchLeavesNoProcessWhenItFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		brk   func(pid int, cancel context.CancelFunc)
		wants string
	}{
		{"cancelled once serving", func(_ int, cancel context.CancelFunc) { cancel() }, "context canceled"},
		{"killed once serving", func(pid int, _ context.CancelFunc) { _ = syscall.Kill(pid, syscall.SIGKILL) }, "GET /v1/runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := benchmark.ControlPlane(ctx, benchmark.ControlPlaneOptions{Server: benchBinary(t), Agents: 50, Tasks: 3,
				Started: func(pid int) { tc.brk(pid, cancel) }})
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("error %v, want one naming %q", err, tc.wants)
			}
			if res.PID == 0 || !gone(res.PID) {
				t.Fatalf("the control plane (pid %d) outlived its failed bench", res.PID)
			}
		})
	}
	_, err := benchmark.ControlPlane(context.Background(), benchmark.ControlPlaneOptions{Server: "/bin/false", Agents: 50})
	if err == nil || !strings.Contains(err.Error(), "exited before serving") {
		t.Fatalf("a binary that never serves: error %v, want one saying it exited before serving", err)
	}
}
