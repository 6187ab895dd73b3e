package controlplane

import (
	"net/http"
	"runtime"
	"runtime/metrics"
)

// The control plane's own footprint, for the bench that measures it at fleet size (`agentd
// bench controlplane`): GET /v1/runtime. Its memory is read by the bench from /proc; what only
// the process knows — its goroutines, its heap, how many agents and tasks it holds — is read
// here from runtime/metrics, which stops no goroutine (runtime.ReadMemStats stops the world, a
// cost a fleet's control plane should not pay for being looked at).

// Runtime is the control plane process's figures at one instant.
type Runtime struct {
	Goroutines uint64 `json:"goroutines"`
	HeapBytes  uint64 `json:"heap_bytes"` // heap objects: live, and dead ones not yet swept
	Agents     int    `json:"agents"`     // agents that have polled, acknowledged, reported or been given a task
	Tasks      int    `json:"tasks"`
}

// runtimeSamples are the runtime/metrics read; a name a Go release drops reads as 0, never an error.
var runtimeSamples = []string{"/sched/goroutines:goroutines", "/memory/classes/heap/objects:bytes"}

// Runtime returns the process's goroutines and heap and the agents and tasks held.
func (s *Server) Runtime() Runtime {
	samples := make([]metrics.Sample, len(runtimeSamples))
	for i, name := range runtimeSamples {
		samples[i].Name = name
	}
	metrics.Read(samples)
	var rt Runtime
	if samples[0].Value.Kind() == metrics.KindUint64 {
		rt.Goroutines = samples[0].Value.Uint64()
	}
	if samples[1].Value.Kind() == metrics.KindUint64 {
		rt.HeapBytes = samples[1].Value.Uint64()
	}
	s.mu.Lock()
	rt.Agents, rt.Tasks = len(s.agents), len(s.tasks)
	s.mu.Unlock()
	return rt
}

// serveRuntime answers GET /v1/runtime; ?gc=1 collects first, so that the heap is the live
// objects alone (a full collection: the bench's price for a figure that does not depend on
// when the last one ran, never paid unless asked for).
func (s *Server) serveRuntime(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("gc") == "1" {
		runtime.GC()
	}
	writeJSON(w, http.StatusOK, s.Runtime())
}
