//go:build plantedbugs

package introspect_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/guard"
	"github.com/agentd/agentd/internal/introspect"
	"github.com/agentd/agentd/internal/simruntime"
)

// With the SettleRule guard off (internal/guard) the core makes a stopped_acked the projection refuses for a STOPPED task
// whose change is not settled: the API shows the task quarantined, /healthz names it.
func TestAQuarantinedTaskIsShownAndNamed(t *testing.T) {
	if why := guard.SkipUnlessOff(guard.SettleRule); why != "" {
		t.Skip(why)
	}
	j, dir := journalWith(t, event.Record{Time: time.Now(), Task: "task/gone", Event: &event.TaskRejected{Reason: "containers: none"}})
	rt, _ := simruntime.Open(dir, "agent-1", nil)
	e := engine.New(engine.Config{AgentID: "agent-1", CleanupWait: time.Hour}, j, rt, nil, nil, nil, zerolog.Nop())
	h := introspect.Handler(e, introspect.Info{Version: "test", DataDir: dir, Runtime: "sim"}, fsm.Config{CleanupWait: time.Hour})
	running(t, e)
	if code, m := get(t, h, "/v1/tasks/task/gone"); code != 200 || !strings.Contains(fmt.Sprint(m["quarantined"]), "stopped_acked") {
		t.Fatalf("/v1/tasks/task/gone: %d %v; want the quarantine shown", code, m)
	}
	if code, m := get(t, h, "/healthz"); code != 503 || !strings.Contains(fmt.Sprint(m["detail"]), "core: ") || !strings.Contains(fmt.Sprint(m["detail"]), "task/gone") {
		t.Fatalf("/healthz: %d %v; want unhealthy, naming task/gone under core", code, m)
	}
}
