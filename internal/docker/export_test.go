package docker

// Test hooks: what the tests of this package reach that the agent never calls.

// Host is the engine's address.
func (e *Engine) Host() string { return e.host }

// Testbox is the test image (make testbox-image), for the contract test (package docker_test).
var Testbox = testbox

// RemoveAgentContainers removes every container and bind volume of an agent id.
var RemoveAgentContainers = removeAgentContainers

// ProbeHealthItself makes the engine run its containers' health checks in the agent, as it
// does on Podman, so the agent's own checks are tested on Docker too.
func (e *Engine) ProbeHealthItself() { e.probeAlways = true }
