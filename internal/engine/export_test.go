package engine

// Hooks for the package's external tests (engine_test), compiled into tests only.

// Observed is the one mapping of the runtime's view of a container into the core's terms.
var Observed = observed
