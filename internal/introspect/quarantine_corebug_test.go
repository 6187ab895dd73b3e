//go:build corebug

package introspect_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/introspect"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/simruntime"
)

// With -tags corebug the core makes a stopped_acked the projection refuses for a STOPPED task
// whose change is not settled: the API shows the task quarantined, /healthz names it.
func TestAQuarantinedTaskIsShownAndNamed(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(filepath.Join(dir, journal.FileName), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := j.Append(context.Background(), event.Record{Time: time.Now(), Task: "task/gone", Event: &event.TaskRejected{Reason: "containers: none"}}); err != nil {
		t.Fatal(err)
	}
	rt, _ := simruntime.Open(dir, "agent-1", nil)
	e := engine.New(engine.Config{AgentID: "agent-1", CleanupWait: time.Hour}, j, rt, nil, nil, nil, zerolog.Nop())
	h := introspect.Handler(e, introspect.Info{Version: "test", DataDir: dir, Runtime: "sim"}, fsm.Config{CleanupWait: time.Hour})
	if err := e.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if code, m := get(t, h, "/v1/tasks/task/gone"); code != 200 || !strings.Contains(fmt.Sprint(m["quarantined"]), "stopped_acked") {
		t.Fatalf("/v1/tasks/task/gone: %d %v; want the quarantine shown", code, m)
	}
	if code, m := get(t, h, "/healthz"); code != 503 || !strings.Contains(fmt.Sprint(m["detail"]), "core: ") || !strings.Contains(fmt.Sprint(m["detail"]), "task/gone") {
		t.Fatalf("/healthz: %d %v; want unhealthy, naming task/gone under core", code, m)
	}
}
