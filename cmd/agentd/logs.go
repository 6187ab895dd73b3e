package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/introspect"
)

// logsCmd prints a container's logs through a running agent's introspection API, stdout to
// stdout and stderr to stderr (the engine's multiplexed stream, demultiplexed with stdcopy).
type logsCmd struct {
	Task      string `arg:"" help:"Task ARN."`
	Container string `arg:"" help:"Container name."`
	Tail      int    `default:"-1" help:"Only the last N lines (default: all)."`
	Follow    bool   `short:"f" help:"Keep printing what the container writes until it stops (or Ctrl-C)."`
	API       string `default:"unix:/var/lib/agentd/api.sock" env:"AGENTD_API" help:"The running agent's introspection API: its trusted socket (unix:PATH, its --api-socket, by default api.sock in its data directory) or its --listen URL. Nothing is sent unless root or this user serves it."`
	APIToken  string `name:"api-token-file" env:"AGENTD_API_TOKEN_FILE" help:"Bearer token file of an agent whose API requires one."`
}

func (l *logsCmd) Run(ctx context.Context) error {
	token := ""
	if l.APIToken != "" {
		b, err := os.ReadFile(l.APIToken)
		if err != nil {
			return fmt.Errorf("--api-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	return printLogs(ctx, l.API, token, l.Task, l.Container, l.Tail, l.Follow, os.Stdout, os.Stderr)
}

func printLogs(ctx context.Context, api, token, task, container string, tail int, follow bool, stdout, stderr io.Writer) error {
	q := url.Values{}
	if tail >= 0 {
		q.Set("tail", strconv.Itoa(tail))
	}
	if follow {
		q.Set("follow", "1")
	}
	// The ARN's slashes stay path separators: the API reads everything before /containers/.
	segs := strings.Split(task, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	client, base := forensics.APIClient(api)
	u := fmt.Sprintf("%s/v1/tasks/%s/containers/%s/logs?%s", base, strings.Join(segs, "/"), url.PathEscape(container), q.Encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("--api %s: %w", api, err)
	}
	req.Header.Set("Accept", introspect.MultiplexedStream)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("--api %s: %w", api, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return fmt.Errorf("logs of %s in %s: HTTP %d: %s", container, task, resp.StatusCode, e.Error)
	}
	if _, err := stdcopy.StdCopy(stdout, stderr, resp.Body); err != nil && ctx.Err() == nil {
		return fmt.Errorf("logs of %s in %s: %w", container, task, err)
	}
	// The agent ends a follow at its idle or lifetime limit (README "Security"): say so, or
	// it would look like the container's end.
	if why := resp.Trailer.Get(introspect.FollowEndTrailer); why != "" {
		return fmt.Errorf("logs of %s in %s: the agent ended the follow at its %s; run it again to go on", container, task, why)
	}
	return nil
}
