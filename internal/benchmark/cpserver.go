package benchmark

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/metrics"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
)

// The control plane measured by ControlPlane is the reference control plane's own code, served
// by the bench binary (`agentd-bench serve-controlplane`) with one route more: GET /v1/runtime,
// what only the process knows — its goroutines, its live heap, the agents and tasks it holds.
// The route lives here, not in the control plane, so a product never carries a measurement API.

// Runtime is the measured control plane's figures at one instant.
type Runtime struct {
	Goroutines uint64 `json:"goroutines"`
	HeapBytes  uint64 `json:"heap_bytes"` // heap objects, collected first: the live ones
	Agents     int    `json:"agents"`     // agents given a task
	Tasks      int    `json:"tasks"`
}

// runtimeSamples are read from runtime/metrics, which stops no goroutine; a name a Go release
// drops reads as 0, never an error.
var runtimeSamples = []string{"/sched/goroutines:goroutines", "/memory/classes/heap/objects:bytes"}

// readRuntime counts what s holds, collects, then reads the process's goroutines and heap (the
// count's own garbage is collected before the heap is read).
func readRuntime(s *controlplane.Server) Runtime {
	var rt Runtime
	tasks, _ := s.Snapshot()
	agents := map[string]bool{}
	for _, t := range tasks {
		agents[t.Agent] = true
	}
	rt.Agents, rt.Tasks = len(agents), len(tasks)
	tasks, agents = nil, nil
	runtime.GC()
	samples := make([]metrics.Sample, len(runtimeSamples))
	for i, name := range runtimeSamples {
		samples[i].Name = name
	}
	metrics.Read(samples)
	if samples[0].Value.Kind() == metrics.KindUint64 {
		rt.Goroutines = samples[0].Value.Uint64()
	}
	if samples[1].Value.Kind() == metrics.KindUint64 {
		rt.HeapBytes = samples[1].Value.Uint64()
	}
	return rt
}

// ServeControlPlane serves the reference control plane (no token, no faults) and GET
// /v1/runtime on listen until ctx ends. Its first line on log is `{"listen": "ADDR"}`, which
// the measuring side waits for.
func ServeControlPlane(ctx context.Context, listen string, log io.Writer) error {
	s := controlplane.New("", controlplane.Faults{})
	mux := http.NewServeMux()
	mux.Handle("/", s.Handler())
	mux.HandleFunc("GET /v1/runtime", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(readRuntime(s))
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := json.NewEncoder(log).Encode(map[string]string{"listen": ln.Addr().String()}); err != nil {
		ln.Close()
		return err
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
