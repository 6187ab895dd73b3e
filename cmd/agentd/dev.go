package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/model"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/simruntime"
)

type devCmd struct {
	DataDir       string        `default:"./agentd-dev" help:"Where the demo's journal is left to explore (its journal and runtime files are replaced)."`
	Tasks         int           `default:"50" help:"Tasks in the demo workload."`
	ThrottleRPS   float64       `name:"throttle-rps" default:"1" help:"Control plane throttling of state-change reports, requests per second (0: off)."`
	ThrottleBurst int           `default:"1" help:"Token bucket size for --throttle-rps."`
	FailRate      float64       `default:"0.02" help:"Share of agent requests the control plane answers 503."`
	CleanupWait   time.Duration `default:"3s" help:"Cleanup wait after a task is stopped and acknowledged."`
	Listen        string        `default:"127.0.0.1:0" help:"Introspection API address (port 0: any free port)."`
	KeepRunning   bool          `help:"Keep running after the workload is cleaned (Ctrl-C to stop)."`
	Timeout       time.Duration `default:"5m" help:"Give up if the workload is not cleaned by then."`
	LogLevel      string        `default:"info" enum:"debug,info,warn,error" help:"Level of the agent's log, written to agent.log in --data-dir."`
}

func (d *devCmd) Run(ctx context.Context) error {
	if d.Tasks <= 0 || d.Tasks > 10000 {
		return fmt.Errorf("--tasks %d: want 1 to 10000", d.Tasks)
	}
	if d.ThrottleRPS < 0 || d.CleanupWait < 0 || d.FailRate < 0 || d.FailRate > 1 {
		return errors.New("--throttle-rps, --cleanup-wait must not be negative; --fail-rate is a share from 0 to 1")
	}
	if err := os.MkdirAll(d.DataDir, 0o700); err != nil {
		return fmt.Errorf("--data-dir %s: %w", d.DataDir, err)
	}
	for _, f := range []string{journal.FileName, journal.FileName + ".pid", simruntime.FileName} {
		if err := os.Remove(filepath.Join(d.DataDir, f)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("--data-dir %s: %w", d.DataDir, err)
		}
	}
	// The terminal shows the progress view; the agent's log goes beside the journal.
	logPath := filepath.Join(d.DataDir, "agent.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("--data-dir %s: %w", d.DataDir, err)
	}
	defer logFile.Close()
	lvl, _ := zerolog.ParseLevel(d.LogLevel)
	log := zerolog.New(logFile).Level(lvl).With().Timestamp().Str("component", "agent").Logger()
	cp := controlplane.New("", controlplane.Faults{ThrottleRPS: d.ThrottleRPS, ThrottleBurst: d.ThrottleBurst, FailRate: d.FailRate, ResendAcked: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	srv := &http.Server{Handler: cp.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	const agentID = "agent-dev"
	a, err := startAgent(agentCtx, agentConfig{DataDir: d.DataDir, Backend: "http://" + ln.Addr().String(), AgentID: agentID,
		Runtime: "sim", CleanupWait: d.CleanupWait, Listen: d.Listen,
		Engine: engine.Config{PollWait: 2 * time.Second}}, log)
	if err != nil {
		return err
	}
	start := time.Now()
	go d.workload(agentCtx, cp, agentID)

	out := io.Writer(os.Stdout)
	tty := isatty.IsTerminal(os.Stdout.Fd())
	fmt.Fprintf(out, "agentd dev: %d tasks on the simulated runtime; control plane on %s throttled to %g req/s; cleanup wait %s\n",
		d.Tasks, ln.Addr(), d.ThrottleRPS, d.CleanupWait)
	fmt.Fprintf(out, "status page: http://%[1]s/   introspection: http://%[1]s/v1/tasks   journal: %[2]s   log: %[3]s\n\n", a.listen, filepath.Join(d.DataDir, journal.FileName), logPath)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPlain, drawn := time.Time{}, 0
	deadline := time.After(d.Timeout)
	var p progress
	for {
		select {
		case <-ctx.Done():
			stopAgent()
			_ = a.wait(agentCtx)
			return nil
		case <-deadline:
			stopAgent()
			_ = a.wait(agentCtx)
			return fmt.Errorf("the workload was not cleaned within --timeout %s", d.Timeout)
		case <-tick.C:
		}
		p = d.measure(a.eng, cp, start)
		switch {
		case tty:
			if drawn > 0 {
				fmt.Fprintf(out, "\033[%dA", drawn)
			}
			drawn = p.draw(out, d)
		case time.Since(lastPlain) >= 2*time.Second:
			lastPlain = time.Now()
			fmt.Fprintln(out, p.plain())
		}
		if p.cleaned == d.Tasks && !d.KeepRunning {
			break
		}
	}

	stopAgent()
	if err := a.wait(agentCtx); err != nil {
		return err
	}
	fmt.Fprintf(out, "\ndone in %s: %d tasks run and cleaned; %d changes accepted (%d re-sent and de-duplicated); %d report requests throttled; %d protocol violations\n",
		time.Since(start).Round(100*time.Millisecond), p.cleaned, p.stats.ChangesAccepted, p.stats.ChangesDuplicate, p.stats.Throttled, p.violations)
	// The claim is checked, not assumed: every invariant replayed over the journal left behind.
	j, closeJ, err := forensics.Open(ctx, forensics.Source{DataDir: d.DataDir})
	if err != nil {
		return err
	}
	rep, err := forensics.Verify(j)
	modelErr := model.Check(j) // and read by the independent model of the protocol
	closeJ()
	if err != nil {
		return err
	}
	if len(rep.Findings) > 0 {
		rep.Write(out)
		return fmt.Errorf("the journal breaks %d invariants", len(rep.Findings))
	}
	if modelErr != nil {
		return modelErr
	}
	fmt.Fprintf(out, "journal verified: no task was cleaned before the control plane acknowledged its STOPPED (the protocol model agrees); the longest wait for an acknowledgement was %s\n\n", p.longestWait.Round(time.Millisecond))
	fmt.Fprintf(out, "The journal is left in %s. Explore it:\n", d.DataDir)
	fmt.Fprintf(out, "  agentd journal stats    --data-dir %s\n", d.DataDir)
	fmt.Fprintf(out, "  agentd journal dump     --data-dir %s --task task/dev-007\n", d.DataDir)
	fmt.Fprintf(out, "  agentd journal timeline --data-dir %s --task task/dev-007 --svg dev-007.svg\n", d.DataDir)
	fmt.Fprintf(out, "  agentd journal replay   --data-dir %s --to-seq 200\n", d.DataDir)
	fmt.Fprintf(out, "  agentd journal verify   --data-dir %s --model\n", d.DataDir)
	if p.violations > 0 {
		return fmt.Errorf("the control plane saw %d protocol violations", p.violations)
	}
	return nil
}

// workload assigns the demo's tasks a little apart, with varied lifetimes and exit codes;
// some run until the control plane stops them, some fail, some are invalid; some are services
// with ports, a health check and a dependency on it, some wait for a migration to succeed.
func (d *devCmd) workload(ctx context.Context, cp *controlplane.Server, agentID string) {
	rng := rand.New(rand.NewPCG(42, uint64(d.Tasks)))
	type stop struct {
		arn string
		at  time.Time
	}
	var stops []stop
	essential := false
	for i := 0; i < d.Tasks; i++ {
		arn := fmt.Sprintf("task/dev-%03d", i)
		t := protocol.Task{ARN: arn, Family: "demo", Version: "1", DesiredStatus: "RUNNING"}
		app := protocol.Container{Name: "app", Image: "demo/app:1"}
		switch k := rng.IntN(20); {
		case k < 8:
			app.Command = []string{"sleep", fmt.Sprintf("%dms", 1000+rng.IntN(5000))}
		case k < 11:
			app.Command = []string{"sleep", fmt.Sprintf("%dms", 500+rng.IntN(3000)), fmt.Sprint(1 + rng.IntN(3))}
		case k < 15:
			app.Command = []string{"run"}
			stops = append(stops, stop{arn, time.Now().Add(time.Duration(2000+rng.IntN(6000)) * time.Millisecond)})
		case k < 17:
			app.Command = []string{"sleep", fmt.Sprintf("%dms", 1500+rng.IntN(2000))}
			t.Containers = append(t.Containers, protocol.Container{Name: "sidecar", Image: "demo/log:1", Essential: &essential})
		case k < 18:
			app.Command = []string{"exit", "0"}
		case k < 19:
			app.Image = "demo/fail-pull:1"
		default:
			app.Name = "bad name!" // breaks the protocol's rule: recorded STOPPED with the reason
		}
		t.Containers = append([]protocol.Container{app}, t.Containers...)
		switch i % 10 {
		case 5: // a service (PROTOCOL.md §4): web waits for its database's health check; both publish a port
			t.Containers = []protocol.Container{
				{Name: "db", Image: "demo/db:1", Command: []string{"run"}, Essential: &essential,
					HealthCheck: &event.HealthCheck{Command: []string{"CMD", "/testbox", "probe", "5432"}, IntervalS: 1, Retries: 2},
					Ports:       []event.PortMapping{{ContainerPort: 5432}}},
				{Name: "web", Image: "demo/web:1", Command: []string{"run"}, Ports: []event.PortMapping{{ContainerPort: 8080}},
					DependsOn: []event.Dependency{{Container: "db", Condition: event.DependHealthy}}},
			}
			stops = append(stops, stop{arn, time.Now().Add(time.Duration(4000+rng.IntN(4000)) * time.Millisecond)})
		case 7: // a migration that must succeed before its app starts
			t.Containers = []protocol.Container{
				{Name: "migrate", Image: "demo/migrate:1", Command: []string{"sleep", "800ms", fmt.Sprint(rng.IntN(2))}, Essential: &essential},
				{Name: "app", Image: "demo/app:1", Command: []string{"sleep", "2s"},
					DependsOn: []event.Dependency{{Container: "migrate", Condition: event.DependSuccess}}},
			}
		}
		_ = cp.AddTask(agentID, t, nil)
		for len(stops) > 0 && time.Now().After(stops[0].at) {
			_ = cp.StopTask(stops[0].arn)
			stops = stops[1:]
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(50+rng.IntN(250)) * time.Millisecond):
		}
	}
	for _, s := range stops {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(s.at)):
		}
		_ = cp.StopTask(s.arn)
	}
}

type progress struct {
	elapsed                                    time.Duration
	byStatus                                   map[event.Status]int
	live, cleaned, unsent, blocked, violations int
	longestBlocked, longestWait                time.Duration
	stats                                      controlplane.Stats
}

func (d *devCmd) measure(e *engine.Engine, cp *controlplane.Server, start time.Time) progress {
	p := progress{elapsed: time.Since(start), byStatus: map[event.Status]int{}}
	now := e.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = e.Query(ctx, func(st *fsm.State) {
		for _, t := range st.Tasks {
			p.byStatus[t.Known]++
			if b := st.BlockedOnAck(t, now); b > 0 {
				p.blocked++
				p.longestBlocked = max(p.longestBlocked, b)
			}
		}
		p.live, p.cleaned, p.unsent = len(st.Tasks), len(st.Tombstones), st.OutboxLen()
	})
	var tasks map[string]controlplane.Task
	tasks, p.stats = cp.Snapshot()
	for _, t := range tasks {
		for _, h := range t.History {
			if h.Container == "" && h.Status == "STOPPED" {
				p.longestWait = max(p.longestWait, h.AcceptedAt.Sub(h.At))
			}
		}
	}
	p.violations = len(cp.Violations())
	return p
}

func (p progress) draw(w io.Writer, d *devCmd) int {
	bar := func(n, total, width int) string {
		if total == 0 {
			return strings.Repeat("·", width)
		}
		f := n * width / total
		return strings.Repeat("█", f) + strings.Repeat("·", width-f)
	}
	running := p.byStatus[event.StatusNone] + p.byStatus[event.StatusPulled] + p.byStatus[event.StatusCreated] + p.byStatus[event.StatusRunning]
	lines := []string{
		fmt.Sprintf("elapsed %-8s cleaned %s %d/%d", p.elapsed.Round(100*time.Millisecond), bar(p.cleaned, d.Tasks, 30), p.cleaned, d.Tasks),
		fmt.Sprintf("tasks    starting/running %-4d stopped, awaiting ack %-4d acked, waiting out cleanup %-4d cleaning %-4d cleaned %-4d",
			running, p.byStatus[event.StatusStopped], p.byStatus[event.StatusStoppedAcked], p.byStatus[event.StatusCleaning], p.cleaned),
		fmt.Sprintf("reports  changes waiting %-5d requests %-5d throttled (429) %-5d failed (5xx) %-4d changes accepted %-5d",
			p.unsent, p.stats.Reports+p.stats.Throttled+p.stats.Failed, p.stats.Throttled, p.stats.Failed, p.stats.ChangesAccepted),
		fmt.Sprintf("guard    blocked on ack now %-4d longest now %-8s cleanups only after the ack: %d done", p.blocked, p.longestBlocked.Round(10*time.Millisecond), p.cleaned),
	}
	for _, l := range lines {
		fmt.Fprintf(w, "\033[2K%s\n", l)
	}
	return len(lines)
}

func (p progress) plain() string {
	return fmt.Sprintf("%6.1fs live=%d stopped-awaiting-ack=%d acked=%d cleaning=%d cleaned=%d unsent=%d throttled=%d accepted=%d",
		p.elapsed.Seconds(), p.live, p.byStatus[event.StatusStopped], p.byStatus[event.StatusStoppedAcked], p.byStatus[event.StatusCleaning],
		p.cleaned, p.unsent, p.stats.Throttled, p.stats.ChangesAccepted)
}
