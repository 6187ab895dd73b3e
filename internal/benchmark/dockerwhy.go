package benchmark

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	dockerevents "github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/runtime"
)

// A Docker benchmark run that fails must say why: which tasks were not cleaned, and what the
// control plane, the agent (its introspection API and its journal) and the engine (the
// container and the events it logged for it) each knew of them at the deadline.

// apiSocket is where the agent under test serves its introspection API: in its data dir
// dir, or, when that path is too long for a socket's address (a test's temporary directory),
// in a directory of its own in the system's temporary directory, removed by drop.
func apiSocket(dir string) (sock string, drop func(), err error) {
	if sock = filepath.Join(dir, "api.sock"); len(sock) < maxSocketPath {
		return sock, func() {}, nil
	}
	own, err := os.MkdirTemp("", "agentd-api-")
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(own, "api.sock"), func() { os.RemoveAll(own) }, nil
}

// maxSocketPath is the longest unix socket path Linux takes (sun_path holds 108 bytes, with
// its NUL).
const maxSocketPath = 107

// notCleanedShown bounds how many tasks a failure describes in full; the rest are named.
const notCleanedShown = 5

// notCleaned describes the tasks still waiting (ARN → when assigned), oldest first, each from
// every side; the agent's health comes first. Every question is bounded: the answer says what
// did not answer.
func notCleaned(cli *client.Client, cp *controlplane.Server, sock, agentID string, began time.Time, waiting map[string]time.Time, seen engineEvents) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	arns := make([]string, 0, len(waiting))
	for arn := range waiting {
		arns = append(arns, arn)
	}
	slices.SortFunc(arns, func(a, b string) int { return cmp.Or(waiting[a].Compare(waiting[b]), strings.Compare(a, b)) })
	// Bound each question, so one that hangs leaves time for the others.
	api, base := forensics.APIClient("unix:" + sock)
	api.Timeout = 20 * time.Second
	defer api.CloseIdleConnections()
	var b strings.Builder
	fmt.Fprintf(&b, "not cleaned: %s\n", strings.Join(arns, ", "))
	fmt.Fprintf(&b, "agent /healthz: %s\n", oneLine(apiGet(ctx, api, base+"/healthz")))
	journal := journalOf(ctx, api, base)
	cpTasks, _ := cp.Snapshot()
	for i, arn := range arns {
		if i == notCleanedShown {
			fmt.Fprintf(&b, "(%d more not shown)\n", len(arns)-i)
			break
		}
		fmt.Fprintf(&b, "task %s, assigned %s after the start, %s ago:\n", arn,
			waiting[arn].Sub(began).Round(time.Millisecond), time.Since(waiting[arn]).Round(time.Millisecond))
		if t, ok := cpTasks[arn]; ok {
			var hist []string
			for _, h := range t.History {
				hist = append(hist, fmt.Sprintf("%s %s at %s (accepted %s)", cmp.Or(h.Container, "task"), h.Status, stampOf(h.At), stampOf(h.AcceptedAt)))
			}
			fmt.Fprintf(&b, "  control plane: status %q desired %s; accepted: %s\n", t.Status, t.Desired, strings.Join(hist, "; "))
		} else {
			fmt.Fprintf(&b, "  control plane: no such task\n")
		}
		fmt.Fprintf(&b, "  agent: %s\n", oneLine(apiGet(ctx, api, base+"/v1/tasks/"+arn)))
		if journal.err != nil {
			fmt.Fprintf(&b, "  journal: %v\n", journal.err)
		}
		for _, rec := range journal.of[arn] {
			fmt.Fprintf(&b, "  journal: %s\n", rec)
		}
		b.WriteString(engineView(ctx, cli, agentID, arn, seen))
	}
	return b.String()
}

// engineView is what the engine holds of a task's containers: their state, and the events it
// sent of each since the run began (did it ever say die?).
func engineView(ctx context.Context, cli *client.Client, agentID, arn string, seen engineEvents) string {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.
		Add("label", runtime.LabelAgent+"="+agentID).Add("label", runtime.LabelTask+"="+arn)})
	if err != nil {
		return fmt.Sprintf("  engine: list: %v\n", err)
	}
	if len(list.Items) == 0 {
		return "  engine: no container\n"
	}
	var b strings.Builder
	for _, c := range list.Items {
		in, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil {
			fmt.Fprintf(&b, "  engine: container %.12s: inspect: %v\n", c.ID, err)
			continue
		}
		if st := in.Container.State; st != nil {
			fmt.Fprintf(&b, "  engine: container %.12s %s pid %d exit %d started %s finished %s error %q\n", c.ID, st.Status, st.Pid,
				st.ExitCode, st.StartedAt, st.FinishedAt, st.Error)
		}
		fmt.Fprintf(&b, "  engine events: %s\n", cmp.Or(strings.Join(seen[c.ID], ", "), "none"))
	}
	return b.String()
}

// engineEvents is what the engine sent of each container of the agent under test (by
// container id), from the run's own subscription, begun before anything was created. Asking
// the engine afterwards (GET /events with since and until) answers only from the last 256
// events it keeps (moby's eventsLimit): a long run, or a busy engine — the other Docker tests
// running beside this one — had pushed the create of a container stuck since out of them, and
// the failure said "engine events:" with nothing, as if the engine had said nothing.
type engineEvents map[string][]string

// eventsKept bounds the events kept of one container: the first eventsFirst (its create and
// start), then the latest (a health check's execs come every few seconds while it runs).
const (
	eventsKept  = 32
	eventsFirst = 8
)

func (e engineEvents) add(m dockerevents.Message) {
	id := m.Actor.ID
	ev := append(e[id], fmt.Sprintf("%s at %s", m.Action, stampOf(time.Unix(0, m.TimeNano))))
	if len(ev) > eventsKept {
		ev = slices.Delete(ev, eventsFirst, eventsFirst+1)
	}
	e[id] = ev
}

// taskRecords is the agent's journal, one line per record, by task.
type taskRecords struct {
	of  map[string][]string
	err error
}

// journalOf reads the agent's whole journal through its API (/v1/journal/records).
func journalOf(ctx context.Context, api *http.Client, base string) taskRecords {
	out := taskRecords{of: map[string][]string{}}
	for from := uint64(1); ; {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/journal/records?from=%d", base, from), nil)
		resp, err := api.Do(req)
		if err != nil {
			out.err = err
			return out
		}
		n := 0
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			var rec struct {
				Seq  uint64 `json:"seq"`
				Task string `json:"task_arn"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			n++
			from = rec.Seq + 1
			if rec.Task != "" {
				out.of[rec.Task] = append(out.of[rec.Task], sc.Text())
			}
		}
		resp.Body.Close()
		if n == 0 {
			return out
		}
	}
}

// apiGet is the body of the API's answer at url, or what went wrong.
func apiGet(ctx context.Context, api *http.Client, url string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := api.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return fmt.Sprintf("%d %s", resp.StatusCode, body)
}

// oneLine compacts JSON (or any text) onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func stampOf(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
