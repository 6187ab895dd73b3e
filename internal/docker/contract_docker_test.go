package docker_test

import (
	"context"
	"os"
	"testing"

	"github.com/agentd/agentd/internal/docker"
	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/runtimetest"
)

// The Docker Engine runtime keeps the runtime contract (package runtimetest) on this machine's
// engine, with the test image (make testbox-image). Every container of the test's agents is
// removed when the test ends, and any the test left behind fails it.
func TestDockerKeepsTheRuntimeContract(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	runtimetest.Run(t, contractEngine(false))
}

// The health checks the agent runs itself (an engine that runs none: Podman) keep the health
// contract on any engine: on Docker, beside the engine's own checks, the verdicts reported are
// the agent's.
func TestDockerAgentsOwnHealthChecksKeepTheContract(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	runtimetest.RunHealth(t, contractEngine(true))
}

// contractEngine opens this machine's engine for the contract, with the agent's own health
// checks when probe says so.
func contractEngine(probe bool) func(t *testing.T) runtimetest.Engine {
	return func(t *testing.T) runtimetest.Engine {
		return runtimetest.Engine{Image: docker.Testbox, Open: func(t *testing.T, agent string) runtime.Runtime {
			e, err := docker.NewEngine(context.Background(), "", agent, docker.PullConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if probe {
				e.ProbeHealthItself()
			}
			t.Cleanup(func() {
				docker.RemoveAgentContainers(t, agent)
				e.Close()
			})
			return e
		}}
	}
}
