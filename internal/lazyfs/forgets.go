//go:build lazyfsforgets

package lazyfs

// A broken lazy file system for the test of the tests: its power cut keeps every unsynced
// write, as a SIGKILL does. The suite must fail on it (make test-powerloss).
func init() { dropUnsynced = false }
