package benchmark

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/backend"
	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/simruntime"
)

const benchAgent = "agent-bench"

// agentRig is a real agent — journal, simulated runtime, HTTP client, engine loop — against
// the reference control plane served on loopback: what the agent benchmarks measure.
type agentRig struct {
	dir    string
	cp     *controlplane.Server
	srv    *httptest.Server
	j      *journal.Journal
	client *backend.Client
	e      *engine.Engine
	stop   func()
}

// newAgentRig opens a fresh journal (the caller may journal a backlog before start) and serves
// the control plane, through wrap when given (a gate that throttles, say).
func newAgentRig(ctx context.Context, dirParent string, faults controlplane.Faults, wrap func(http.Handler) http.Handler) (*agentRig, error) {
	dir, err := os.MkdirTemp(dirParent, "agentd-bench-")
	if err != nil {
		return nil, err
	}
	r := &agentRig{dir: dir, cp: controlplane.New("", faults)}
	h := r.cp.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	r.srv = httptest.NewServer(h)
	if r.j, err = journal.Open(filepath.Join(dir, journal.FileName), journal.Options{}); err != nil {
		r.close()
		return nil, err
	}
	if _, err := engine.ResolveAgentID(ctx, r.j, benchAgent); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// start recovers the agent from its journal and runs its loop until close.
func (r *agentRig) start(ctx context.Context, cfg engine.Config) error {
	rt, err := simruntime.Open(r.dir, benchAgent, nil)
	if err != nil {
		return err
	}
	if r.client, err = backend.New(backend.Config{URL: r.srv.URL, AgentID: benchAgent}); err != nil {
		return err
	}
	cfg.AgentID = benchAgent
	r.e = engine.New(cfg, r.j, rt, r.client, nil, nil, zerolog.Nop())
	if err := r.e.Recover(ctx); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.e.Run(runCtx) }()
	r.stop = func() { cancel(); <-done }
	return nil
}

func (r *agentRig) close() {
	if r.stop != nil {
		r.stop()
	}
	if r.client != nil {
		r.client.Close()
	}
	if r.j != nil {
		r.j.Close()
	}
	r.srv.Close()
	os.RemoveAll(r.dir)
}
