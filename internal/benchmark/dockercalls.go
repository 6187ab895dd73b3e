package benchmark

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// callProxy stands between one side of the Docker benchmark and the engine, on a unix socket
// of its own, and counts the side's API calls by kind ("POST /containers/{id}/start"): what a
// side asks of the engine is measured from outside it, the same way for the bare loop and the
// agent. Streams (events, wait) pass through unbuffered.
type callProxy struct {
	dir  string
	sock string
	srv  *http.Server
	tr   *http.Transport
	mu   sync.Mutex
	n    map[string]int
}

// newCallProxy serves a counting proxy to the engine at host (the client's DaemonHost:
// unix:// or tcp://) on a socket in a temporary directory under parent ("": the system's).
func newCallProxy(parent, host string) (*callProxy, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("bench docker: engine address %q: %w", host, err)
	}
	network, addr := u.Scheme, u.Host
	if network == "unix" {
		addr = u.Path
	}
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}, MaxIdleConnsPerHost: 64}
	dir, err := os.MkdirTemp(parent, "agentd-bench-calls-")
	if err != nil {
		return nil, err
	}
	p := &callProxy{dir: dir, sock: filepath.Join(dir, "docker.sock"), tr: tr, n: map[string]int{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
		},
		Transport:     tr,
		FlushInterval: -1,
	}
	ln, err := net.Listen("unix", p.sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench docker: call counter: %w", err)
	}
	p.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := callKind(r.Method, r.URL.Path)
		p.mu.Lock()
		p.n[k]++
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// host is the proxy's address for a client or --docker-host.
func (p *callProxy) host() string { return "unix://" + p.sock }

// counts are the calls made so far, by kind.
func (p *callProxy) counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.n))
	for k, v := range p.n {
		out[k] = v
	}
	return out
}

func (p *callProxy) close() {
	_ = p.srv.Close()
	p.tr.CloseIdleConnections()
	_ = os.RemoveAll(p.dir)
}

// callKind names an API call without its version, container id or image reference.
func callKind(method, path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if len(segs) > 0 && strings.HasPrefix(segs[0], "v1.") {
		segs = segs[1:]
	}
	switch {
	case len(segs) >= 2 && segs[0] == "containers" && segs[1] != "create" && segs[1] != "json" && segs[1] != "prune":
		segs[1] = "{id}"
	case len(segs) >= 2 && segs[0] == "images" && segs[1] != "create" && segs[1] != "json" && segs[1] != "prune" && segs[1] != "load":
		// a reference may hold slashes: everything up to the action (json, tag, …) is it
		last := segs[len(segs)-1]
		if method == http.MethodDelete || len(segs) == 2 {
			segs = []string{"images", "{ref}"}
		} else {
			segs = []string{"images", "{ref}", last}
		}
	}
	return method + " /" + strings.Join(segs, "/")
}

// perTask reports whether a call kind is a task's own (about one container or image); the
// others (ping, events, lists, volumes) are the session's, made once per process however
// many tasks it runs.
func perTask(kind string) bool {
	_, path, _ := strings.Cut(kind, " ")
	return strings.HasPrefix(path, "/containers/create") || strings.HasPrefix(path, "/containers/{id}") ||
		strings.HasPrefix(path, "/images/{ref}") || strings.HasPrefix(path, "/images/create")
}

// DockerCalls is what one side asked of the engine: per task, by kind and in all, and the
// session's calls (once per process: ping, the event stream, reconciliation's list) per run.
type DockerCalls struct {
	PerTask        float64            `json:"per_task"`
	ByKind         map[string]float64 `json:"per_task_by_kind"`
	SessionPerRun  float64            `json:"session_calls_per_run"`
	SessionByKind  map[string]int     `json:"session_calls"`
	counted, tasks int
	runs           int
}

// add takes one run's counts of tasks lifecycles.
func (c *DockerCalls) add(counts map[string]int, tasks int) {
	if c.ByKind == nil {
		c.ByKind, c.SessionByKind = map[string]float64{}, map[string]int{}
	}
	c.runs++
	c.tasks += tasks
	for k, n := range counts {
		if perTask(k) {
			c.ByKind[k] += float64(n) // summed here, divided in done
			c.counted += n
		} else {
			c.SessionByKind[k] += n
		}
	}
}

// done turns the sums into per-task and per-run figures.
func (c *DockerCalls) done() {
	if c.tasks == 0 {
		return
	}
	for k := range c.ByKind {
		c.ByKind[k] /= float64(c.tasks)
	}
	c.PerTask = float64(c.counted) / float64(c.tasks)
	session := 0
	for _, n := range c.SessionByKind {
		session += n
	}
	c.SessionPerRun = float64(session) / float64(c.runs)
}

// String lists the per-task calls by kind, most first.
func (c DockerCalls) String() string {
	kinds := make([]string, 0, len(c.ByKind))
	for k := range c.ByKind {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		if c.ByKind[kinds[i]] != c.ByKind[kinds[j]] {
			return c.ByKind[kinds[i]] > c.ByKind[kinds[j]]
		}
		return kinds[i] < kinds[j]
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %.2f", k, c.ByKind[k])
	}
	return strings.Join(parts, ", ")
}
