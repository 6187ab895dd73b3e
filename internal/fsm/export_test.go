package fsm

// Hooks for the package's external tests (fsm_test), compiled into tests only.

// NextUp is the task's steps on its way up, as decide.go reads them from the task table.
var NextUp = nextUp
