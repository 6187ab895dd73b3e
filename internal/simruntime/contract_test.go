package simruntime_test

import (
	"testing"

	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/runtimetest"
	"github.com/agentd/agentd/internal/simruntime"
)

// The simulated runtime keeps the runtime contract (package runtimetest), on the wall clock as
// in dev mode: every engine a directory, every agent's runtime a view of its file, the test
// image preloaded as an operator's (make testbox-image puts it on a Docker Engine).
func TestSimKeepsTheRuntimeContract(t *testing.T) {
	const image = "agentd-testbox:latest"
	runtimetest.Run(t, func(t *testing.T) runtimetest.Engine {
		dir := t.TempDir()
		return runtimetest.Engine{Image: image, Open: func(t *testing.T, agent string) runtime.Runtime {
			rt, err := simruntime.Open(dir, agent, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rt.Preload(image); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rt.Close() })
			return rt
		}}
	})
}
