package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/simruntime"
	"github.com/agentd/agentd/internal/testrig"
)

// lines is a log writer that hands each line to the test.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	select {
	case l <- string(p):
	default:
	}
	return len(p), nil
}

// attack31: a long message id is held by its digest so it costs the agent little (event.MessageKey),
// but a failed acknowledgement logged the ids as sent: a control plane answering acks 500 and
// re-sending a payload under a 1 MiB id had every poll write a 1 MiB log line.
func TestAFailedAckOfALongIDLogsItsKey(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir, &atomic.Bool{})
	t.Cleanup(func() { j.Close() })
	id, err := engine.ResolveAgentID(context.Background(), j, "agent-ack")
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simruntime.Open(filepath.Join(dir, "sim"), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := make(lines, 256)
	// A control plane that sends one payload under a 1 MiB message id and fails every
	// acknowledgement, as a hostile or broken one may (it then re-sends the payload).
	raw, _ := json.Marshal(protocol.Task{ARN: "task/long", DesiredStatus: "STOPPED", Containers: []protocol.Container{{Name: "app", Image: "x"}}})
	cp := &testrig.ControlPlane{
		Payloads: testrig.Once([]protocol.Payload{{MessageID: strings.Repeat("m", 1<<20), Tasks: []json.RawMessage{raw}}}),
		Acks:     func([]string) error { return errors.New("HTTP 500") },
	}
	e := engine.New(engine.Config{AgentID: id, Seed: 1}, j, sim, cp, nil, nil, zerolog.New(logs))
	if err := e.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l := <-logs:
			if !strings.Contains(l, "ack failed") {
				continue
			}
			if len(l) > 4096 {
				t.Fatalf("a failed ack of a 1 MiB message id wrote a log line of %d bytes", len(l))
			}
			return
		case <-deadline:
			t.Fatal("no failed ack logged within 10s")
		}
	}
}
