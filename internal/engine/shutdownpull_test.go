package engine_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/simruntime"
)

// A pull has no deadline while it makes progress, so a large image may take many minutes.
// A SIGTERM must not wait for it: the agent stops within moments (the pull is journaled
// nowhere and is made again after the restart), not when the pull ends — past any service
// manager's stop timeout, which kills the agent before it journals agent_stopped.
func TestShutdownDoesNotWaitForAPullInProgress(t *testing.T) {
	dir := t.TempDir()
	rt, err := simruntime.Open(dir, "agent-shut", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	pulling := make(chan struct{}, 1)
	rt.SetPullFaults(func(image string, _ int) simruntime.PullFault {
		return simruntime.PullFault{Took: time.Hour} // a steady pull of a large image
	})
	rt.SetSleep(func(ctx context.Context, d time.Duration) error {
		select {
		case pulling <- struct{}{}:
		default:
		}
		<-ctx.Done() // progressing until cancelled: only the agent's own stop ends it
		return ctx.Err()
	})
	j := openJournal(t, dir, new(atomic.Bool))
	defer j.Close()
	payloads := make(chan protocol.Payload, 1)
	cp := pollFrom(payloads)
	e := engine.New(engine.Config{AgentID: "agent-shut", Seed: 1}, j, rt, cp, nil, nil, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := e.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	b, _ := json.Marshal(protocol.Task{ARN: "task/big", DesiredStatus: "RUNNING", Containers: []protocol.Container{{Name: "app", Image: "big/app:1"}}})
	payloads <- protocol.Payload{MessageID: "m-1", Tasks: []json.RawMessage{b}}
	select {
	case <-pulling:
	case <-time.After(20 * time.Second):
		t.Fatal("the pull did not start within 20 s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not stop within 10 s of its signal: shutdown waits for a pull in progress")
	}
}
