package docker

// Test hooks: what the tests of this package reach that the agent never calls.

// Host is the engine's address.
func (e *Engine) Host() string { return e.host }
